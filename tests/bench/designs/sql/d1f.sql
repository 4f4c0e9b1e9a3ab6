/* tests/bench/designs/sql/d1f.sql — design D1f: D1 (d1.sql) with q.queue at fillfactor 50. At 100,
   most non-HOT queue updates move the new version to another page and log an extra row lock.
   The table is empty here, so setting the fillfactor after d1.sql makes it is the same as making
   it so. */
\ir d1.sql
ALTER TABLE q.queue SET (fillfactor = 50);
