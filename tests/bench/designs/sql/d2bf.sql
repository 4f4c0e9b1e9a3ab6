/* tests/bench/designs/sql/d2bf.sql — design D2bf: D2b (d2b.sql) with q.queue at fillfactor 50
   (set on the empty table, as d2f.sql does). */
\ir d2b.sql
ALTER TABLE q.queue SET (fillfactor = 50);
