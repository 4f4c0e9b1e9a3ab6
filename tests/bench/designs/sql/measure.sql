/* tests/bench/designs/sql/measure.sql — one run of one design, in a fresh database made from the
   design's template:
     psql -v design=d0 -v run=1 -v n=30000 -d DB -f measure.sql    (run.sh does this)
   with the results directory as the working directory: it appends to summary.csv, walrecs.csv,
   sizes.csv and byrel.csv there. In one session: load n intents, ANALYZE, CHECKPOINT, drain. The
   WAL LSN and this backend's CPU are read before and after the load and the drain, and bench.drain
   returns them at every phase boundary, so every WAL record of each range is classified with
   pg_walinspect's pg_get_wal_records_info (the PostgreSQL 15 name) and split exactly into claim
   and record. Needs wal_keep_size large enough that the CHECKPOINT does not recycle the load's WAL.
   summary.csv, per run: design, run, n, load WAL bytes, load CPU ns, load ticks x 1e7, load wall s,
   drain WAL bytes, drain CPU ns, drain ticks x 1e7, drain wall s, claim ns, record ns, rows left
   not succeeded, batches.
   walrecs.csv: design, run, phase, resource manager, record type, count, bytes, full-page-image bytes.
   byrel.csv: the relation each Heap/Heap2/Btree record's first block reference names, per phase.
   sizes.csv: pages of each table and index after the drain. */
\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only on
\pset fieldsep ','
SELECT pg_current_wal_lsn() AS l0, bench.cpu_ns() AS c0, bench.ticks() AS t0, extract(epoch FROM clock_timestamp()) AS w0 \gset
CALL bench.load(:n);
SELECT pg_current_wal_lsn() AS l1, bench.cpu_ns() AS c1, bench.ticks() AS t1, extract(epoch FROM clock_timestamp()) AS w1 \gset
ANALYZE;
CHECKPOINT;
SELECT pg_current_wal_lsn() AS l2, bench.cpu_ns() AS c2, bench.ticks() AS t2, extract(epoch FROM clock_timestamp()) AS w2 \gset
-- the real functions (d0, d0e) as they are; the hand-written statements planned with their arrays' values
SELECT set_config('plan_cache_mode', CASE WHEN :'design' IN ('d0', 'd0e') THEN 'auto' ELSE 'force_custom_plan' END, false) \gset
CALL bench.drain(256, NULL, NULL) \gset
SELECT pg_current_wal_lsn() AS l3, bench.cpu_ns() AS c3, bench.ticks() AS t3, extract(epoch FROM clock_timestamp()) AS w3 \gset
-- pg_walinspect reads only flushed WAL ("cannot accept future end LSN"), and the marks are write
-- positions that may lie past the flush point (a claim that found nothing commits without WAL;
-- buffers evicted by other backends are written, not flushed). A transaction that writes WAL
-- commits with a flush of everything before it (synchronous_commit on); its records lie past l3,
-- outside every measured range.
CREATE TEMP TABLE wal_flushed ();
\o | cat >> walrecs.csv
WITH m AS (SELECT a.l, a.o FROM unnest(:'marks'::pg_lsn[]) WITH ORDINALITY AS a(l, o)),
r AS (SELECT m1.l AS s, m2.l AS e, CASE WHEN m1.o % 3 = 1 THEN 'claim' ELSE 'record' END AS phase
        FROM m m1 JOIN m m2 ON m2.o = m1.o + 1 WHERE m1.o % 3 <> 0 AND m2.l > m1.l
      UNION ALL SELECT :'l0', :'l1', 'load'
      UNION ALL SELECT :'l2', :'l3', 'drain')
SELECT :'design', :run, phase, w.resource_manager, w.record_type, count(*), sum(w.record_length), sum(w.fpi_length)
  FROM r, LATERAL pg_get_wal_records_info(r.s, r.e) w GROUP BY 3, 4, 5 ORDER BY 3, 4, 5;
\o | cat >> summary.csv
WITH c AS (SELECT a.c, a.o FROM unnest(:'cpus'::bigint[]) WITH ORDINALITY AS a(c, o)),
p AS (SELECT CASE WHEN c1.o % 3 = 1 THEN 'claim' ELSE 'record' END AS phase, c2.c - c1.c AS d
        FROM c c1 JOIN c c2 ON c2.o = c1.o + 1 WHERE c1.o % 3 <> 0)
SELECT :'design', :run, :n,
       pg_wal_lsn_diff(:'l1', :'l0'), :c1 - :c0, (:t1 - :t0)::bigint * 10000000, round((:w1 - :w0)::numeric, 3),
       pg_wal_lsn_diff(:'l3', :'l2'), :c3 - :c2, (:t3 - :t2)::bigint * 10000000, round((:w3 - :w2)::numeric, 3),
       (SELECT sum(d) FROM p WHERE phase = 'claim'), (SELECT sum(d) FROM p WHERE phase = 'record'),
       (SELECT n FROM bench.left), (SELECT count(*) FROM unnest(:'marks'::pg_lsn[])) / 3;
\o | cat >> sizes.csv
SELECT :'design', :run, relname, pages FROM bench.sizes ORDER BY relname;
\o | cat >> byrel.csv
-- which relation each Heap/Heap2/Btree record touched (its first block reference), per phase
WITH m AS (SELECT a.l, a.o FROM unnest(:'marks'::pg_lsn[]) WITH ORDINALITY AS a(l, o)),
r AS (SELECT m1.l AS s, m2.l AS e, CASE WHEN m1.o % 3 = 1 THEN 'claim' ELSE 'record' END AS phase
        FROM m m1 JOIN m m2 ON m2.o = m1.o + 1 WHERE m1.o % 3 <> 0 AND m2.l > m1.l
      UNION ALL SELECT :'l0', :'l1', 'load')
SELECT :'design', :run, phase, coalesce(c.relname, '?'), w.resource_manager, w.record_type, count(*), sum(w.record_length)
  FROM r, LATERAL pg_get_wal_records_info(r.s, r.e) w
  LEFT JOIN pg_class c ON c.relfilenode = (regexp_match(w.block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid AND c.relfilenode <> 0
 WHERE w.resource_manager IN ('Heap', 'Heap2', 'Btree')
 GROUP BY 3, 4, 5, 6 ORDER BY 3, 4, 5, 6;
\o
