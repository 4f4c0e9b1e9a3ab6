/* tests/bench/designs/sql/d2f.sql — design D2f: D2 (d2.sql) with q.queue at fillfactor 50.
   Queue = due time and lease, claim HOT on intents. The table is empty here, so setting the
   fillfactor after d2.sql makes it is the same as making it so. */
\ir d2.sql
ALTER TABLE q.queue SET (fillfactor = 50);
