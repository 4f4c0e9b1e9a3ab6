-- 0028: drop what only relays before 0.1.0 used (issue 25, item 3).
--
-- Each of these was kept "for relays of earlier releases" when a later
-- migration replaced it; the relay of 0.1.0 (tag v0.1.0, migrations
-- 0001-0024) calls none of them, so the rollback window of this release
-- (back to the 0.1.0 image) does not need them:
--   outbox.defer                  retired in 0009 with the retry budget
--   outbox.next_due_ms()          retired in 0009 (next_due_ms(targets) since)
--   outbox.record, 12 arrays      replaced in 0011 by the 13-array record (key_sent)
--   outbox.take_over_expired, 3 arguments   replaced in 0011 (the held ids)
--   targets.retry_budget_ratio, targets.retry_budget_floor   unread since 0009
-- What 0025 retired (outbox.claim, the 4-argument take_over_expired) stays:
-- the 0.1.0 relay calls them, so they go in the release after this one.
--
-- Locks: DROP COLUMN takes targets' ACCESS EXCLUSIVE lock for a moment (no
-- rewrite: the columns are only marked dropped); DROP FUNCTION takes none
-- on tables.

DROP FUNCTION outbox.defer(text, bigint[], integer[], integer);
DROP FUNCTION outbox.next_due_ms();
DROP FUNCTION outbox.record(text, bigint[], integer[], outbox.intent_state[], integer[], boolean[],
                            outbox.attempt_class[], boolean[], integer[], text[], integer[], text[]);
DROP FUNCTION outbox.take_over_expired(text, integer, integer);
ALTER TABLE outbox.targets DROP COLUMN retry_budget_ratio, DROP COLUMN retry_budget_floor;
