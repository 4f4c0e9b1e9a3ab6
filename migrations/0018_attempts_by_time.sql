-- 0018: attempts by time without a B-tree entry per attempt (issue 17;
-- docs/design.md, "Cost per delivery").
--
-- attempts: the B-tree on "at" becomes a BRIN index (time ranges:
--    target_health's 5-minute window; rows arrive in time order, so a block
--    range covers a short span of time) and a partial B-tree over failures
--    only (the status page's recent failures, newest first, LIMIT 20). A
--    succeeded attempt, most of them, no longer writes a B-tree entry for
--    its time. Both are built here under the SHARE lock of the migration's
--    transaction: records wait for them, about 0.6 s per million attempts
--    rows (measured: BRIN 0.3 s, the partial B-tree 0.26 s per million on
--    2 cores). With a long history, run it after a prune or at a quiet hour.
--
-- In a transaction of its own (see 0017, item 3): the builds hold attempts'
-- SHARE lock, so records wait for them; enqueues and claims do not.

CREATE INDEX attempts_at_range ON outbox.attempts USING brin (at);
CREATE INDEX attempts_failures ON outbox.attempts (at)
    WHERE class IN ('not_sent', 'ambiguous', 'retry_later', 'key_conflict', 'permanent_failure',
                    'reconcile_inconclusive');
DROP INDEX outbox.attempts_at;
