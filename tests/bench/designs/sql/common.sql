/* tests/bench/designs/sql/common.sql — run by run.sh, as postgres, in every design's template
   database right after `outbox-relay migrate`: the target 'bench', the pg_walinspect extension
   (superuser only, hence postgres), and two helpers that read this backend's own CPU time:
   bench.cpu_ns() (ns on CPU, /proc/self/schedstat, exact) and bench.ticks() (utime + stime in
   10 ms ticks, /proc/self/stat; a cross-check). */
INSERT INTO outbox.targets (name, url) VALUES ('bench', 'http://127.0.0.1:9/');
CREATE EXTENSION IF NOT EXISTS pg_walinspect;
CREATE SCHEMA bench;
-- this backend's CPU: ns on CPU (schedstat, precise) and utime+stime ticks (/proc/self/stat)
CREATE FUNCTION bench.cpu_ns() RETURNS bigint LANGUAGE sql AS
$$ SELECT split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint $$;
CREATE FUNCTION bench.ticks() RETURNS bigint LANGUAGE sql AS
$$ SELECT (f[12])::bigint + (f[13])::bigint
     FROM (SELECT string_to_array(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ') AS f) s $$;
