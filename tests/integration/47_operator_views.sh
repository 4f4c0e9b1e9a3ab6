#!/usr/bin/env bash
# What an operator and an agent are told (issue 22, items 4, 5, 6 and 8), with a
# real relay, real receivers that answer 500, refuse or go down and come back:
#   status      outbox-relay status shows why a key is not succeeding: the row's
#               last_error and the last attempt's class, HTTP status and error
#               (the caller's views, outcome() and /v1/intents, stay terse); a
#               login without outbox_operator still gets the outcome
#   a person    an unknown outcome on a keyless target without a status URL says
#               "outcome unknown: needs a person — no status URL, no key" in
#               outcome(), /v1/intents, outbox-relay stuck and /ui
#   approvals   outbox-relay approvals (text, --json) and /ui list what waits, the
#               rule and why it holds each (a missing or mistyped field); stuck
#               points to them
#   smaller     ?wait= says how it ended (Outbox-Wait: timed-out | final) and
#               when it was cut to 60 s (Outbox-Wait-Capped); a succeeded attempt
#               is logged at the default level with its trace_id; a failed
#               database connect is a warning; libcurl's text once in an error;
#               a key with a newline echoed escaped; a refused decision names the
#               role to grant; --help names /ui and approvals; after the circuit
#               closes, retries in their back-off go at once
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

# cli ARGS... → RC, OUT (stdout), ERR (stderr)
cli() {
    "$RELAY_BIN" "$@" >"$T/cli.out" 2>"$T/cli.err"
    RC=$?
    OUT=$(cat "$T/cli.out")
    ERR=$(cat "$T/cli.err")
}
jfield() { jq -r "$1" <"$T/cli.out"; }
# enqueue KEY TARGET [PAYLOAD]
enqueue() {
    local doc=${3:-'{}'}
    sql "SELECT outbox.enqueue('$1', '$2', '$doc')" >/dev/null
}

receiver_start ok --dedupe
receiver_start broken --mode-status 500
receiver_start outage --dedupe --mode-status 503
refusing_port REFUSED
BROKEN="http://127.0.0.1:$RECV_PORT_broken"
target_add ok "http://127.0.0.1:$RECV_PORT_ok/act"
# keyed, so a 500 is retried with the same key, later (back-off up to 5 min)
target_add flaky "$BROKEN/flaky" backoff_base_ms=300000
# no key and no status URL: an ambiguous attempt leaves the outcome to a person
target_add legacy "$BROKEN/legacy" key_header=NULL
target_add refused "http://127.0.0.1:$REFUSED/act" backoff_base_ms=300000
target_add appr "http://127.0.0.1:$RECV_PORT_ok/appr" approval_rule="'\$.amount_cents > 100000'"
target_add outage "http://127.0.0.1:$RECV_PORT_outage/act" circuit_failure_threshold=3 \
    backoff_base_ms=300000 circuit_probe_max_ms=1000

TRACE=4bf92f3577b34da6a3ce929d0e0e4736
sql "SELECT outbox.enqueue('ok:1', 'ok', '{\"n\": 1}', p_traceparent => '00-$TRACE-00f067aa0ba902b7-01')" >/dev/null
enqueue flaky:1 flaky
enqueue legacy:1 legacy
enqueue refused:1 refused
enqueue appr:big appr '{"amount_cents": 250000}'
enqueue appr:missing appr '{"amount": 250000}'
enqueue appr:string appr '{"amount_cents": "250000"}'
enqueue appr:small appr '{"amount_cents": 5}'

# The page reads as outbox_operator (docs/operations.md): granted to the relays' login.
sql "GRANT outbox_operator TO itest_relay" >/dev/null
relay_start one --admin-listen "127.0.0.1:0" --poll-interval-ms 200
ADMIN="http://127.0.0.1:$(relay_admin_port one)"
ok "ok:1 is delivered" wait_for 20 "SELECT state FROM outbox.intents WHERE key = 'ok:1'" succeeded
ok "flaky:1 got its 500 (pending again, for a same-key retry later)" \
    wait_for 20 "SELECT state FROM outbox.intents WHERE key = 'flaky:1' AND attempts >= 1" pending
ok "legacy:1 got its 500: unknown" wait_for 20 "SELECT state FROM outbox.intents WHERE key = 'legacy:1'" unknown
ok "refused:1 was refused" wait_for 20 "SELECT attempts FROM outbox.intents WHERE key = 'refused:1'" 1

# ---------------------------------------------------------------- 4. status: why a key is not succeeding
cli status flaky:1
is "$RC" 0 "status of a key answered 500: 0"
is "$(grep '^message:' <<<"$OUT")" "message:          outcome unknown, reconciling" "the caller's message"
is "$(grep '^last_error:' <<<"$OUT")" "last_error:       HTTP 500" "last_error: the row's (HTTP 500), not null"
ok "next_attempt_at: when the same-key retry is due" grep -qE '^next_attempt_at:  [0-9-]{10}T[0-9:.]+Z$' <<<"$OUT"
ok "last_attempt: number, time and relay" grep -qE '^last_attempt:     [0-9]+ at [0-9-]{10}T[0-9:.]+Z by relay-one$' <<<"$OUT"
is "$(grep '^  class:' <<<"$OUT")" "  class:          ambiguous (request sent)" "the last attempt's class"
is "$(grep '^  http_status:' <<<"$OUT")" "  http_status:    500" "its HTTP status"
is "$(grep '^  error:' <<<"$OUT")" "  error:          HTTP 500" "its error"
cli status flaky:1 --json
is "$(jfield '[.last_error, .last_attempt.attempt >= 1, .last_attempt.class, .last_attempt.http_status, .last_attempt.error, .last_attempt.request_sent, .last_attempt.relay] | @json')" \
    '["HTTP 500",true,"ambiguous",500,"HTTP 500",true,"relay-one"]' "--json: last_error and last_attempt"
is "$(sql "SELECT coalesce(last_error, 'null') FROM outbox.outcome('flaky:1')")" null "outcome() stays terse: no raw error"
is "$(curl -s "$ADMIN/v1/intents/flaky:1" | jq -r '.last_error')" null "/v1/intents stays terse too"
sql "CREATE ROLE app47 LOGIN IN ROLE outbox_app; CREATE ROLE op47 LOGIN IN ROLE outbox_operator" >/dev/null
cli status flaky:1 --db "postgresql://app47@127.0.0.1:$PGPORT/$PGDATABASE"
is "$RC" 0 "a login without outbox_operator still reads the outcome"
is "$(grep '^last_attempt:' <<<"$OUT")" "last_attempt:     not shown: reading attempts needs the outbox_operator role" \
    "and is told what the detail needs"

# ---------------------------------------------------------------- 5. needs a person
PERSON='outcome unknown: needs a person — no status URL, no key'
is "$(sql "SELECT message FROM outbox.outcome('legacy:1')")" "$PERSON" "outcome(): needs a person — no status URL, no key"
is "$(curl -s "$ADMIN/v1/intents/legacy:1" | jq -r '[.status, .message] | @tsv')" "reconciling	$PERSON" \
    "/v1/intents: status reconciling, the same message"
cli stuck
ok "outbox-relay stuck: the same reason" grep -qE "^legacy:1 +legacy +unknown +$PERSON " <<<"$OUT"
cli status legacy:1
is "$(grep '^message:' <<<"$OUT")" "message:          $PERSON" "outbox-relay status: the same message"

# ---------------------------------------------------------------- 6. approvals
cli approvals
is "$RC" 0 "approvals: 0"
is "$(sed -n 1p <<<"$OUT" | tr -s ' ')" "KEY TARGET AGE RULE WHY" "approvals: header"
ok "approvals: a true rule" grep -qE '^appr:big +appr +[0-9]+s +\$\.amount_cents > 100000 +the rule is true for this payload$' <<<"$OUT"
ok "approvals: a missing field" grep -qE '^appr:missing +appr +[0-9]+s +\$\.amount_cents > 100000 +\$\.amount_cents is missing$' <<<"$OUT"
ok "approvals: a mistyped field" \
    grep -qE '^appr:string +appr .* \$\.amount_cents is a string, compared with a number$' <<<"$OUT"
is "$(wc -l <<<"$OUT")" 4 "approvals: the three that wait (appr:small was not held)"
ok "approvals: never a value of the payload" bash -c "! grep -q 250000 '$T/cli.out'"
cli approvals --json
is "$(jfield '[.approvals[] | [.key, .reason]] | @json')" \
    '[["appr:big","the rule is true for this payload"],["appr:missing","$.amount_cents is missing"],["appr:string","$.amount_cents is a string, compared with a number"]]' \
    "approvals --json: key and reason, oldest first"
is "$(jfield '.approvals[0] | [.target, .rule, (.age_s >= 0)] | @json')" '["appr","$.amount_cents > 100000",true]' \
    "approvals --json: target, rule, age"
cli stuck
is "$(tail -1 <<<"$OUT")" "3 intents await approval: outbox-relay approvals" "stuck points to what awaits approval"
curl -s "$ADMIN/ui" >"$T/ui.html"
ok "/ui: an approvals section with the count" grep -q '<section id="approvals"><h2>Awaiting approval (3)</h2>' "$T/ui.html"
ok "/ui: with why each is held" grep -q '\$.amount_cents is a string, compared with a number' "$T/ui.html"
ok "/ui: the stuck key that needs a person" grep -q "legacy:1</a>.*$PERSON" "$T/ui.html"
curl -s "$ADMIN/ui/intents/legacy:1" >"$T/ui-legacy.html"
ok "/ui/intents/legacy:1: the message" grep -q "$PERSON" "$T/ui-legacy.html"

# ---------------------------------------------------------------- 8. ?wait=
start=$(date +%s%N)
curl -s -D "$T/wait1.h" -o "$T/wait1.json" "$ADMIN/v1/intents/flaky:1?wait=1s"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
ok "wait=1s on a key that stays pending: answered after the wait ($ms ms)" test "$ms" -ge 900
ok "... 200 with Outbox-Wait: timed-out" grep -qi '^Outbox-Wait: timed-out' "$T/wait1.h"
is "$(jq -r .status "$T/wait1.json")" reconciling "... and the status as it is"
ok "... no cap was hit" bash -c "! grep -qi '^Outbox-Wait-Capped' '$T/wait1.h'"
curl -s -D "$T/wait2.h" -o /dev/null -m 10 "$ADMIN/v1/intents/ok:1?wait=90s"
ok "wait=90s on a final key: Outbox-Wait: final" grep -qi '^Outbox-Wait: final' "$T/wait2.h"
ok "... and Outbox-Wait-Capped: 60s" grep -qi '^Outbox-Wait-Capped: 60s' "$T/wait2.h"
curl -s -D "$T/nowait.h" -o /dev/null "$ADMIN/v1/intents/ok:1"
ok "without wait: no Outbox-Wait header" bash -c "! grep -qi '^Outbox-Wait' '$T/nowait.h'"

# ---------------------------------------------------------------- 8. logs, errors, keys, roles, help
ok "a succeeded attempt is logged at info, with its trace_id" \
    grep -qE "\"level\":\"info\",\"event\":\"attempt\",\"key\":\"ok:1\".*\"class\":\"succeeded\".*\"trace_id\":\"$TRACE\"" \
    "$T/relay-one.log"
COULDNT="Couldn't connect to server"
is "$(sql "SELECT (length(a.error) - length(replace(a.error, \$\$$COULDNT\$\$, ''))) / length(\$\$$COULDNT\$\$)
             FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'refused:1'")" 1 \
    "a refused connection: libcurl's text once in the error"
is "$(sql "SELECT last_error FROM outbox.intents WHERE key = 'refused:1'" | grep -o "$COULDNT" | wc -l)" 1 \
    "... and in the row's last_error"

relay_start badlogin --db "postgresql://nobody47@127.0.0.1:$PGPORT/$PGDATABASE" --reconnect-max-ms 200
ok "a failed database connect is logged as a warning" wait_cmd 10 \
    grep -q '"level":"warn","event":"db_connect_failed"' "$T/relay-badlogin.log"
kill -TERM "$RELAY_PID_badlogin"
relay_wait badlogin 20 >/dev/null

cli status $'run-1:\nstep-2'
is "$RC" 3 "status of a key with a newline: no such key (3)"
is "$ERR" "outbox-relay status: no intent with key E'run-1:\\nstep-2'" "the key is escaped, on one line"
sql "SELECT outbox.enqueue(E'run-1:\\nstep-2', 'ok', '{}')" 2>"$T/enqueue.err" >/dev/null
ok "enqueue refuses it with the key escaped" \
    grep -qF "key E'run-1:\\nstep-2' contains a control character (U+000A)" "$T/enqueue.err"

cli approve appr:big --by alice --db "postgresql://op47@127.0.0.1:$PGPORT/$PGDATABASE"
is "$RC" 1 "an operator login cannot approve: 1"
is "$(sed -n 1p <<<"$ERR")" "outbox-relay approve: permission denied for function approve" "the database's message"
is "$(sed -n 2p <<<"$ERR")" "outbox-relay approve: hint: approve needs the outbox_admin role; an admin grants it: GRANT outbox_admin TO op47;" \
    "a hint names the role to grant"

cli --help
ok "--help: the token guards /ui too" grep -q '/metrics, /v1/ and /ui of the admin port' <<<"$OUT"
ok "--help: approvals" grep -qE '^  approvals +intents awaiting approval' <<<"$OUT"

# ---------------------------------------------------------------- 8. after the circuit closes
# Five intents fail with 503 (ambiguous; keyed: retried with the same key after a
# back-off of up to 5 minutes), three failures in a row open the circuit. Once
# the target is back, one probe succeeds and closes it: the five go at once,
# not when each back-off ends.
for i in 1 2 3 4 5; do enqueue "out:$i" outage; done
ok "the outage opens the circuit" wait_for 20 "SELECT circuit FROM outbox.target_state WHERE target = 'outage'" open
ok "all five were tried and wait on their back-off" wait_for 20 \
    "SELECT count(*) FROM outbox.intents WHERE key LIKE 'out:%' AND state = 'pending' AND attempts >= 1" 5
echo "# their retries are due in: $(sql "SELECT string_agg(greatest(0, extract(epoch FROM next_attempt_at - now()))::int || ' s', ', ')
                                        FROM outbox.intents WHERE key LIKE 'out:%'")"
curl -s -X POST -d '{}' "http://127.0.0.1:$RECV_PORT_outage/_mode" >/dev/null
enqueue out:probe outage   # due now: the probe
ok "the probe succeeds and the circuit closes" wait_for 20 \
    "SELECT circuit FROM outbox.target_state WHERE target = 'outage'" closed
closed_at=$(date +%s)
ok "the five retries go at once after the circuit closed (not after their back-off)" wait_for 15 \
    "SELECT count(*) FROM outbox.intents WHERE key LIKE 'out:%' AND state = 'succeeded'" 6
echo "# all six succeeded $(( $(date +%s) - closed_at )) s after the circuit closed"

kill -TERM "$RELAY_PID_one"
relay_wait one 30
is "$?" 0 "relay exits 0 on SIGTERM"
ok "no sanitizer report in the relay" relay_logs_clean
itest_done
