-- 0033: lease renewal (and release) find their rows by their ids, and young
-- leases are left alone (issue 26: PostgreSQL's share of a delivery).
--
-- A relay renews the leases of the rows it holds once a second, on the
-- connection that also claims. renew_leases joined the ids it was given
-- with the rows in flight under the caller's name, and PostgreSQL chose how
-- by the statistics of intents. In the drain of a backlog (the table
-- analyzed while every row was pending, the headline of make bench) those
-- say that almost nothing is in flight, so the plan read intents_in_flight
-- first and, for each of its rows, went through the whole list of ids: the
-- rows in flight times the ids held. In a drain of 100,000 with 2,560 rows
-- in flight and 3,840 ids (deliveries plus outcomes waiting to be recorded)
-- one call took 3.3 s, 5.4 million comparisons; renewal was as much of the
-- claiming connection's time as the claims, and the claims queued behind it.
--
-- Now the statement starts from the ids and looks each one up by the primary
-- key. The in-flight test is written `state IS NOT DISTINCT FROM
-- 'in_flight'` (the same test: state is never NULL) so that it cannot match
-- the predicate of intents_in_flight, and no plan can start from that index
-- whatever the statistics say. The work is one probe per id held.
--
-- And a lease in its first sixth is not renewed. Every renewal is an UPDATE
-- of an indexed column (a new row version and an entry in each index), and
-- most deliveries end in milliseconds: renewing every row held at each tick
-- rewrote rows that were about to be recorded, and its row locks made the
-- record wait. A lease is now renewed once less than five sixths of it is
-- left. The relay's tick is lease_ms / 3 at most, so a row still has half its
-- lease, or more, before it is renewed (two thirds before); with the default
-- 30 s lease and a 1 s tick, a delivery is first renewed after 5 s.
--
-- outbox.release (the rows a relay gives back unsent: at shutdown, or a
-- claim whose answer came too late) joined its ids with the rows in flight
-- the same way, and is written the same way now.
--
-- The signatures, the answers and the grants are unchanged.

CREATE OR REPLACE FUNCTION outbox.renew_leases(p_relay text, p_ids bigint[], p_lease_ms integer)
    RETURNS SETOF bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    WITH held AS (
        SELECT i.id
          FROM (SELECT DISTINCT h.id FROM unnest(p_ids) AS h(id)) AS h
          JOIN outbox.intents i ON i.id = h.id
         WHERE i.state IS NOT DISTINCT FROM 'in_flight'   -- not intents_in_flight: by id
           AND i.lease_owner = p_relay
           AND i.lease_expires_at < now() + p_lease_ms * interval '1 millisecond' * 5 / 6
           FOR UPDATE OF i SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
      FROM held
     WHERE i.id = held.id
    RETURNING i.id;
END
$$;

CREATE OR REPLACE FUNCTION outbox.release(p_relay text, p_ids bigint[], p_attempts integer[])
    RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    released integer;
BEGIN
    UPDATE outbox.intents i
       SET state = 'pending',
           attempts = i.attempts - 1,
           first_attempt_at = CASE WHEN i.attempts = 1 THEN NULL ELSE i.first_attempt_at END,
           lease_owner = NULL,
           lease_expires_at = NULL,
           next_attempt_at = now(),
           updated_at = now()
      FROM unnest(p_ids, p_attempts) AS u(id, attempt)
     WHERE i.id = u.id AND i.state IS NOT DISTINCT FROM 'in_flight'   -- not intents_in_flight: by id
       AND i.lease_owner = p_relay
       AND i.attempts = u.attempt;
    GET DIAGNOSTICS released = ROW_COUNT;
    RETURN released;
END
$$;
