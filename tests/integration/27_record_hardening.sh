#!/usr/bin/env bash
# The relay's writes under database faults (issue "Hardening", items 5, 6, 13, 14):
#   A. the record connection is held down (its backend stopped with SIGSTOP)
#      for longer than a lease while deliveries finish: the relay keeps renewing
#      the leases of its finished rows and never takes them over itself; each
#      key ends with one attempt, recorded once;
#   B. one outcome makes the record statement fail (a trigger refuses its
#      history row): the batch is halved until that outcome is alone, only it
#      is dropped (logged with its intent), every other outcome is recorded;
#      once the fault is gone, the dropped row is taken over and delivered
#      again with the same key (the receiver deduplicates);
#   C. an intent deleted by hand while in flight does not hold up the others;
#   D. the main connection is black-holed (its backend stopped): within the
#      query deadline the relay drops it, reconnects and delivers on;
#   E. attempts say whether the request carried the key.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start keyed --dedupe
receiver_start slow --dedupe --delay-ms 1500
receiver_start legacy
target_add keyed "http://127.0.0.1:$RECV_PORT_keyed/act"
target_add slow "http://127.0.0.1:$RECV_PORT_slow/act"
target_add legacy "http://127.0.0.1:$RECV_PORT_legacy/act" key_header=NULL

relay_start one --lease-ms 1500 --poll-interval-ms 200
ok "relay up" wait_for 10 "SELECT count(*) FROM outbox.relays WHERE relay_id = 'relay-one'" 1
# backend_of main|record → pid of the relay's backend for that connection
# (the relay names its connections in application_name)
backend_of() {
    sql "SELECT pid FROM pg_stat_activity WHERE application_name = 'outbox-relay/$1'
          ORDER BY backend_start DESC LIMIT 1"
}

# ---------------------------------------------------------------- A. record connection held down
enqueue_many keyed "warm:" 5
wait_for 10 "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" 5
rec_pid=$(backend_of record)
ok "the record connection's backend is known ($rec_pid)" test -n "$rec_pid"
kill -STOP "$rec_pid"
enqueue_many slow "held:" 10
sleep 5 # the slow receiver answers after 1.5 s: outcomes wait in memory for 3.5 s, over two leases (1.5 s)
kill -CONT "$rec_pid"
ok "A: the 10 intents succeed once the record connection is back" wait_for 20 \
    "SELECT count(*) FROM outbox.intents WHERE key LIKE 'held:%' AND state = 'succeeded'" 10
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
           WHERE i.key LIKE 'held:%' AND a.error LIKE 'lease of relay % expired%'")" 0 \
    "A: the relay took none of its own finished rows over"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key LIKE 'held:%'")" 10 \
    "A: one history row per key"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
           WHERE i.key LIKE 'held:%' AND a.recorded")" 10 "A: each recorded once"

# ---------------------------------------------------------------- B. one outcome the database refuses
sql "CREATE TABLE public.poison (key text PRIMARY KEY);
     CREATE FUNCTION public.poison_attempt() RETURNS trigger LANGUAGE plpgsql AS \$\$
     BEGIN
         IF EXISTS (SELECT 1 FROM public.poison p JOIN outbox.intents i ON i.key = p.key WHERE i.id = NEW.intent_id) THEN
             RAISE EXCEPTION 'poisoned outcome for intent %', NEW.intent_id;
         END IF;
         RETURN NEW;
     END \$\$;
     CREATE TRIGGER poison BEFORE INSERT ON outbox.attempts FOR EACH ROW EXECUTE FUNCTION public.poison_attempt();
     GRANT SELECT ON public.poison TO PUBLIC;   -- the trigger runs as record's owner
     INSERT INTO public.poison VALUES ('batch:7');" >/dev/null
sql "SELECT count(*) FROM (SELECT outbox.enqueue('batch:' || g, 'slow', jsonb_build_object('n', g))
       FROM generate_series(1, 16) g) x" >/dev/null
ok "B: the 15 other outcomes of the batch are recorded" wait_for 20 \
    "SELECT count(*) FROM outbox.intents WHERE key LIKE 'batch:%' AND state = 'succeeded'" 15
is "$(sql "SELECT state FROM outbox.intents WHERE key = 'batch:7'")" in_flight "B: the poisoned one is not (yet)"
poison_id=$(sql "SELECT id FROM outbox.intents WHERE key = 'batch:7'")
ok "B: the relay logged which outcome it dropped" \
    grep -q "\"event\":\"record_dropped\",\"intent_id\":$poison_id," "$T/relay-one.log"
ok "B: and that it halved the batch to find it" grep -q '"event":"record_failed".*"retrying"' "$T/relay-one.log"
sql "DROP TRIGGER poison ON outbox.attempts" >/dev/null
ok "B: without the fault, the dropped row is taken over and delivered again with its key" wait_for 20 \
    "SELECT state FROM outbox.intents WHERE key = 'batch:7'" succeeded
is "$(receiver_stat slow keys_with_duplicate_effects)" 0 "B: no key acted on twice (the target deduplicated the re-send)"

# ---------------------------------------------------------------- C. an intent deleted while in flight
sql "SELECT count(*) FROM (SELECT outbox.enqueue('gone:' || g, 'slow', jsonb_build_object('n', g))
       FROM generate_series(1, 8) g) x" >/dev/null
wait_for 5 "SELECT count(*) FROM outbox.intents WHERE key LIKE 'gone:%' AND state = 'in_flight'" 8
sql "DELETE FROM outbox.intents WHERE key = 'gone:3'" >/dev/null
ok "C: the other 7 succeed" wait_for 20 \
    "SELECT count(*) FROM outbox.intents WHERE key LIKE 'gone:%' AND state = 'succeeded'" 7
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key = 'gone:3'")" 0 "C: the deleted one stays deleted (no orphan history)"

# ---------------------------------------------------------------- D. main connection black-holed
# A relay with a short query deadline. (Relay one keeps the default, 30 s: a
# connection given up while a statement waits in its socket runs that
# statement when the server wakes; the fence keeps the row right, but the
# history would show the batch twice, which part A counts.)
kill -TERM "$RELAY_PID_one"; relay_wait one 30
is "$?" 0 "relay one exits 0"
relay_start two --lease-ms 1500 --poll-interval-ms 200 --query-timeout-ms 3000
ok "relay two up" wait_for 10 "SELECT count(*) FROM outbox.relays WHERE relay_id = 'relay-two'" 1
sleep 1
main_pid=$(backend_of main)
ok "D: the main connection's backend is known ($main_pid)" test -n "$main_pid"
lost_before=$(grep -c '"event":"db_lost"' "$T/relay-two.log")
kill -STOP "$main_pid"
ok "D: within the 3 s query deadline (+ a poll) the relay gives the connection up" \
    bash -c "for i in \$(seq 1 80); do [ \$(grep -c '\"event\":\"db_lost\".*no answer from the database within 3000 ms' '$T/relay-two.log') -gt 0 ] && exit 0; sleep 0.1; done; exit 1"
enqueue_many keyed "after:" 20
ok "D: it reconnects and delivers on" wait_for 20 \
    "SELECT count(*) FROM outbox.intents WHERE key LIKE 'after:%' AND state = 'succeeded'" 20
kill -CONT "$main_pid"
echo "# db_lost events: before $lost_before, after $(grep -c '"event":"db_lost"' "$T/relay-two.log")"

# ---------------------------------------------------------------- E. key_sent
sql "SELECT outbox.enqueue('plain:1', 'legacy', '{\"ref\": \"plain:1\"}')" >/dev/null
wait_for 10 "SELECT state FROM outbox.intents WHERE key = 'plain:1'" succeeded
is "$(sql "SELECT a.key_sent FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'plain:1'")" f \
    "E: the legacy target's attempt says no key was sent"
is "$(sql "SELECT bool_and(a.key_sent) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
           WHERE i.key LIKE 'after:%'")" t "E: the keyed target's attempts say the key was sent"

kill -TERM "$RELAY_PID_two"; relay_wait two 30
is "$?" 0 "relay two exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
