-- tests/sql/lib/sessions.sql — other sessions for pgTAP files that need two
-- or more transactions at once (dblink), included with \ir lib/sessions.sql
-- after plan(). pg_temp functions: they vanish with the test's session.
--
--   pg_temp.connstr()               a connection string back to this database,
--                                   as this user
--   pg_temp.open(name)              a named dblink session with 20 s statement
--                                   and lock timeouts (a regression fails
--                                   instead of hanging); returns its backend pid
--   pg_temp.waits_on_lock(pid, s)   true once that backend waits on a lock,
--                                   false if it does not within s seconds

CREATE FUNCTION pg_temp.connstr() RETURNS text LANGUAGE sql AS $$
    SELECT format('host=%s port=%s dbname=%s user=%s application_name=outbox_sqltest',
                  coalesce(host(inet_server_addr()), split_part(current_setting('unix_socket_directories'), ',', 1)),
                  current_setting('port'), current_database(), current_user)
$$;
CREATE FUNCTION pg_temp.open(name text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE pid int;
BEGIN
    PERFORM dblink_connect(name, pg_temp.connstr());
    PERFORM dblink_exec(name, 'SET statement_timeout = ''20s''');
    PERFORM dblink_exec(name, 'SET lock_timeout = ''20s''');
    SELECT p INTO pid FROM dblink(name, 'SELECT pg_backend_pid()') AS t(p int);
    RETURN pid;
END $$;

CREATE FUNCTION pg_temp.waits_on_lock(p_pid int, secs float8) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE deadline timestamptz := clock_timestamp() + secs * interval '1 second';
BEGIN
    LOOP
        PERFORM pg_stat_clear_snapshot();
        IF EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = p_pid AND wait_event_type = 'Lock') THEN
            RETURN true;
        END IF;
        IF clock_timestamp() > deadline THEN RETURN false; END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
END $$;
