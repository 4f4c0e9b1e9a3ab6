#!/usr/bin/env bash
# The operator commands against a real database: status, stuck, resolve,
# approve, reject, cancel, retry, targets. Text and --json output, the exit
# codes scripts rely on (0 ok, 1 database, 2 usage, 3 no such key, 4 refused),
# the argument split (command flags here, connection options to config_load),
# least privilege (an operator login cannot decide), secrets never printed,
# and that `retry` wakes an idle relay, which then sends the intent.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

# cli ARGS... → RC, OUT (stdout), ERR (stderr)
cli() {
    "$RELAY_BIN" "$@" >"$T/cli.out" 2>"$T/cli.err"
    RC=$?
    OUT=$(cat "$T/cli.out")
    ERR=$(cat "$T/cli.err")
}
# jfield FILTER → jq -r FILTER of the last stdout
jfield() { jq -r "$1" <"$T/cli.out"; }
# set_state KEY SQL-ASSIGNMENTS: put a row in a state directly, as the superuser
set_state() { sql "UPDATE outbox.intents SET $2 WHERE key = '$1'" >/dev/null; }

receiver_start recv --dedupe
URL="http://127.0.0.1:$RECV_PORT_recv"
export OUTBOX_SECRET_CLI_TEST_SIGNING='s3cr3t-do-not-print-42'
target_add keyed "$URL/keyed" secret_env="'OUTBOX_SECRET_CLI_TEST_SIGNING'"
target_add legacy "$URL/legacy" key_header=NULL status_url="'$URL/status/{key}'"
target_add appr "$URL/appr" approval_rule="'\$.amount > 100'"
# enqueue KEY TARGET [PAYLOAD]
enqueue() {
    local doc=${3:-'{}'}
    sql "SELECT outbox.enqueue('$1', '$2', '$doc')" >/dev/null
}

# ---------------------------------------------------------------- help, usage
cli --help
is "$RC" 0 "--help exits 0"
ok "--help lists the operator commands" grep -q '^  retry KEY \[--by NAME\]' <<<"$OUT"
ok "--help documents the exit codes" grep -q '3 no such key' <<<"$OUT"
cli status --help
is "$RC" 0 "status --help exits 0"
is "$(head -1 <<<"$OUT")" "usage: outbox-relay status KEY [--json] [connection options]" "status --help prints its usage"
cli status
is "$RC" 2 "status without KEY: usage error (2)"
is "$(head -1 <<<"$ERR")" "outbox-relay status: missing KEY" "and says what is missing"
cli status a b
is "$RC" 2 "status with two keys: 2"
cli status a --note x
is "$RC" 2 "a flag of another command: 2"
is "$(head -1 <<<"$ERR")" "outbox-relay status: --note is not an option of this command" "naming the flag"
cli status a --no-such-option x
is "$RC" 2 "an unknown option (passed on to config_load): 2"
is "$ERR" "outbox-relay: unknown option '--no-such-option' (see --help)" "config_load's message"
cli stuck --json=yes
is "$RC" 2 "--json takes no value: 2"
is "$OUT" "" "usage errors print nothing on stdout"

# ---------------------------------------------------------------- status
cli status no-such-key
is "$RC" 3 "status of a missing key: 3"
is "$ERR" "outbox-relay status: no intent with key 'no-such-key'" "with the key in the message"
is "$OUT" "" "and nothing on stdout"
cli status no-such-key --json
is "$RC$OUT" 3 "--json: also 3, stdout empty"

enqueue 'st:1' keyed '{"amount": 5}'
set_state 'st:1' "state = 'succeeded', attempts = 2, response_status = 201, response_body = '{\"id\": \"r-1\"}'"
cli status 'st:1'
is "$RC" 0 "status of a key: 0"
is "$(sed -n 1p <<<"$OUT")" "key:              st:1" "text: key line"
is "$(sed -n 2p <<<"$OUT")" "status:           succeeded" "text: status line"
is "$(sed -n 3p <<<"$OUT")" "message:          the target acted" "text: message line"
is "$(grep '^response_status:' <<<"$OUT")" "response_status:  201" "text: response status"
is "$(grep '^response_body:' <<<"$OUT")" 'response_body:    {"id": "r-1"}' "text: response body"
is "$(grep '^last_error:' <<<"$OUT")" "last_error:       -" "text: NULL shows as -"
ok "text: updated_at in UTC, ISO 8601" grep -qE '^updated_at: +[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$' <<<"$OUT"
cli status 'st:1' --json
is "$RC" 0 "status --json: 0"
is "$(jfield '[.key, .status, .state, .target, .attempts, .response_status, .response_body, .last_error] | @json')" \
    '["st:1","succeeded","succeeded","keyed",2,201,"{\"id\": \"r-1\"}",null]' "--json: typed fields"
is "$(jq -s length <"$T/cli.out")" 1 "--json: exactly one JSON document"

enqueue 'st:esc' keyed
set_state 'st:esc' "state = 'succeeded', response_status = 200, response_body = E'\\u001b[31mred\\u009b0m\\nnext'"
cli status 'st:esc'
is "$(grep '^response_body:' <<<"$OUT")" "response_body:     [31mred  0m next" \
    "text: a target's escape sequences and newlines are not passed to the terminal"
cli status 'st:esc' --json
is "$(jfield .response_body | od -An -c | tr -s ' ')" "$(printf '\033[31mred\302\2330m\nnext\n' | od -An -c | tr -s ' ')" \
    "--json: the body as stored"

enqueue 'st:2' keyed
set_state 'st:2' "state = 'unknown', ambiguous = true, attempts = 1, first_attempt_at = now()"
cli status 'st:2'
is "$(sed -n 2p <<<"$OUT" | tr -s ' ')" 'status: reconciling' "an unknown outcome: status reconciling"
# keyed, no status URL: nothing settles it but a person, who may retry while the key is remembered (0023)
ok "... and the message says it needs a person" \
    grep -q '^message: outcome unknown: needs a person — no status URL; the target remembers the key until ' \
    <<<"$(sed -n 3p <<<"$OUT" | tr -s ' ')"

# ---------------------------------------------------------------- stuck
set_state 'st:2' "state = 'succeeded'"
cli stuck
is "$RC:$OUT" "0:no stuck keys" "stuck with nothing stuck: 0, 'no stuck keys'"
cli stuck --json
is "$RC:$(jfield '.stuck | length')" "0:0" "stuck --json with nothing stuck: {\"stuck\": []}"

enqueue 'sk:unknown' legacy
set_state 'sk:unknown' "state = 'unknown', ambiguous = true, attempts = 3, first_attempt_at = now(),
                        created_at = now() - interval '2 hours 5 minutes',
                        last_error = E'timeout after send\nsecond line'"
enqueue 'sk:old-pending' keyed
set_state 'sk:old-pending' "next_attempt_at = now() - interval '10 minutes', created_at = now() - interval '10 minutes'"
cli stuck
is "$RC" 0 "stuck: 0"
is "$(sed -n 1p <<<"$OUT")" "KEY             TARGET  STATE    REASON                      AGE   ATTEMPTS  LAST_ERROR" \
    "stuck: aligned header"
is "$(sed -n 2p <<<"$OUT")" "sk:unknown      legacy  unknown  outcome unknown             2h5m  3         timeout after send second line" \
    "stuck: oldest first, age readable, a newline in last_error does not break the row"
ok "stuck: the old pending row is listed" grep -q '^sk:old-pending  keyed   pending  pending for over 5 minutes  10m ' <<<"$OUT"
is "$(wc -l <<<"$OUT")" 3 "stuck: one line per key"
cli stuck --json
is "$(jfield '[.stuck[] | .key] | @json')" '["sk:unknown","sk:old-pending"]' "stuck --json: the keys, oldest first"
# age_s is counted from the row's created_at (now() - 2h5m when it was set) to
# the command's now(): 7500 s, or a second more when a second boundary fell
# between the two statements (a loaded machine): an age, not a duration bound.
is "$(jfield '.stuck[0] | [.state, .reason, (.age_s >= 7500 and .age_s < 7560), (.age_s | type), .attempts, .last_error] | @json')" \
    '["unknown","outcome unknown",true,"number",3,"timeout after send\nsecond line"]' "stuck --json: typed fields, raw last_error"

# ---------------------------------------------------------------- targets
cli targets
is "$RC" 0 "targets: 0"
is "$(sed -n 1p <<<"$OUT" | tr -s ' ')" \
    "NAME URL METHOD KEY_HEADER KEY_TTL STATUS_URL TIMEOUT_MS RETRY ENABLED CIRCUIT SECRET_ENV" "targets: header"
ok "targets: a target without a key header says it cannot deduplicate" \
    grep -qE '^legacy +http://\S+/legacy +POST +\(none: cannot deduplicate\) +1d +http://\S+/status/\{key\} +10000 +3d +yes +closed +-$' <<<"$OUT"
ok "targets: the secret's variable name is shown" grep -qE '^keyed .* OUTBOX_SECRET_CLI_TEST_SIGNING$' <<<"$OUT"
ok "targets: the secret's value never" bash -c '! grep -q "s3cr3t" "$1"' _ "$T/cli.out"
cli targets --json
is "$RC" 0 "targets --json: 0"
is "$(jfield '[.targets[] | .name] | @json')" '["appr","keyed","legacy"]' "targets --json: by name"
is "$(jfield '.targets[] | select(.name == "legacy") | [.key_header, .deduplicates, .key_ttl_s, .timeout_ms, .enabled] | @json')" \
    '[null,false,86400,10000,true]' "targets --json: legacy cannot deduplicate"
is "$(jfield '.targets[] | select(.name == "keyed") | .secret_env')" OUTBOX_SECRET_CLI_TEST_SIGNING "targets --json: secret_env is a name"
is "$(jfield '.targets[] | select(.name == "legacy") | [.max_attempts, .retry_for_s, .circuit] | @json')" '[null,259200,"closed"]' \
    "targets --json: no cap on attempts, retry for 3 days, circuit closed"
ok "targets --json: the secret's value never" bash -c '! grep -q "s3cr3t" "$1"' _ "$T/cli.out"

# ---------------------------------------------------------------- approve, reject
enqueue 'ap:1' appr '{"amount": 500}'
enqueue 'ap:2' appr '{"amount": 600}'
enqueue 'ap:small' appr '{"amount": 1}'
cli approve 'ap:1'
is "$RC" 2 "approve without --by: 2"
is "$(head -1 <<<"$ERR")" "outbox-relay approve: missing --by" "naming the missing flag"
cli approve 'ap:small' --by alice
is "$RC" 4 "approve of a pending row: refused (4)"
is "$ERR" "outbox-relay approve: outbox.approve: key 'ap:small' is pending, not awaiting_approval" \
    "with the database's message"
cli approve no-such-key --by alice
is "$RC" 3 "approve of a missing key: 3"
cli approve 'ap:1' --by ''
is "$RC" 2 "approve --by '': the database says 22023 → 2"
cli approve 'ap:1' --by alice
is "$RC:$OUT" "0:approved 'ap:1': now pending" "approve: 0, now pending"
is "$(sql "SELECT state || ' ' || decided_by FROM outbox.intents WHERE key = 'ap:1'")" "pending alice" "approve took effect"
cli reject 'ap:2' --by bob
is "$RC" 2 "reject without --reason: 2"
cli reject 'ap:2' --reason 'too much'
is "$RC" 2 "reject without --by: 2"
cli reject 'ap:2' --by=bob --reason='over the limit' --json
is "$RC" 0 "reject: 0"
is "$(jfield '[.key, .state] | @json')" '["ap:2","cancelled"]' "reject --json: key and new state"
is "$(sql "SELECT last_error FROM outbox.intents WHERE key = 'ap:2'")" "rejected: over the limit" "with the reason"

# ---------------------------------------------------------------- cancel
enqueue 'ca:1' keyed
set_state 'ca:1' "next_attempt_at = now() + interval '1 hour'"
cli cancel 'ca:1'
is "$RC:$OUT" "0:cancelled 'ca:1': now cancelled" "cancel of a never-sent row (no reason): 0"
cli cancel 'sk:unknown' --reason 'x'
is "$RC" 4 "cancel of an unknown row: refused (4)"
is "$(sed -n 2p <<<"$ERR")" "outbox-relay cancel: hint: Only intents that were never sent (or, in an ordering group, that failed) can be cancelled." \
    "the database's hint follows the message"
cli cancel no-such-key
is "$RC" 3 "cancel of a missing key: 3"

# ---------------------------------------------------------------- resolve
enqueue 're:1' legacy
set_state 're:1' "state = 'unknown', ambiguous = true, attempts = 1, first_attempt_at = now()"
cli resolve 're:1' succeeded
is "$RC" 2 "resolve without --note: 2"
is "$(head -1 <<<"$ERR")" "outbox-relay resolve: missing --note" "naming the missing flag"
cli resolve 're:1' --note 'x'
is "$RC" 2 "resolve without an outcome: 2"
cli resolve 're:1' maybe --note 'x'
is "$RC" 2 "resolve to another outcome: 2"
cli resolve 're:1' succeeded --note ''
is "$RC" 2 "resolve with an empty note: the database says 22023 → 2"
cli resolve 'ca:1' failed --note 'x'
is "$RC" 4 "resolve of a cancelled row: refused (4)"
cli resolve no-such-key failed --note 'x'
is "$RC" 3 "resolve of a missing key: 3"
cli resolve 're:1' succeeded --note 'refund R-1 seen in the PSP console'
is "$RC:$OUT" "0:resolved 're:1': now succeeded" "resolve: 0"
is "$(sql "SELECT state || ' / ' || decision_note FROM outbox.intents WHERE key = 're:1'")" \
    "succeeded / refund R-1 seen in the PSP console" "resolve took effect, with the note"

# ---------------------------------------------------------------- retry
enqueue 'rt:legacy' legacy
set_state 'rt:legacy' "state = 'unknown', ambiguous = true, attempts = 1, first_attempt_at = now()"
cli retry 'rt:legacy'
is "$RC" 4 "retry of unknown on a target without a key header: refused (4)"
is "$(sed -n 1p <<<"$ERR")" "outbox-relay retry: outbox.retry_now: key 'rt:legacy' has an unknown outcome and target 'legacy' cannot deduplicate (no key header): sending it again could execute it twice; find out from the target whether it acted, then resolve it" \
    "saying why, and pointing to resolve"
is "$(sed -n 2p <<<"$ERR")" "outbox-relay retry: hint: outbox.resolve(key, 'succeeded' | 'failed', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT" \
    "with the command to run"
is "$(sql "SELECT state FROM outbox.intents WHERE key = 'rt:legacy'")" unknown "and the row is unchanged"

enqueue 'rt:expired' keyed
set_state 'rt:expired' "state = 'unknown', ambiguous = true, attempts = 1, first_attempt_at = now() - interval '25 hours'"
cli retry 'rt:expired'
is "$RC" 4 "retry of unknown past the target's key_ttl: refused (4)"
ok "saying the key may be forgotten" grep -q "past target 'keyed''s key_ttl of 24:00:00: the target may have forgotten the key" <<<"$ERR"

cli retry 'st:1'
is "$RC" 4 "retry of a succeeded row: refused (4)"
cli retry no-such-key
is "$RC" 3 "retry of a missing key: 3"
cli retry
is "$RC" 2 "retry without KEY: 2"

enqueue 'rt:failed' legacy
set_state 'rt:failed' "state = 'failed', attempts = 8, first_attempt_at = now() - interval '1 hour', next_attempt_at = now() + interval '1 hour', last_error = 'HTTP 404'"
# Connection options after the key, in both spellings, go to config_load.
cli retry 'rt:failed' --by carol --db "$DATABASE_URL" --json
is "$RC" 0 "retry of a failed row with no ambiguous attempt: 0 (--db after the key)"
is "$(jfield '[.key, .state] | @json')" '["rt:failed","pending"]' "retry --json"
is "$(sql "SELECT state || ' ' || attempts || ' ' || (first_attempt_at IS NULL) FROM outbox.intents WHERE key = 'rt:failed'")" \
    "pending 0 true" "failed → pending with attempts from 0"
is "$(sql "SELECT relay || ' ' || class FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.key = 'rt:failed' ORDER BY a.id DESC LIMIT 1")" "carol resolved" "--by is recorded in the attempts row"
sql "SELECT outbox.cancel('rt:failed', 'test done')" >/dev/null

# A key that looks like an option, after "--".
enqueue '--odd-key' keyed
cli status --db="$DATABASE_URL" -- --odd-key
is "$RC:$(sed -n 1p <<<"$OUT")" "0:key:              --odd-key" "-- ends the options: a key starting with --"
sql "SELECT outbox.cancel('--odd-key')" >/dev/null

# ---------------------------------------------------------------- database errors, roles
cli status 'st:1' --db "postgresql://nobody@127.0.0.1:1/none" --connect-timeout-ms 2000
is "$RC" 1 "an unreachable database: 1"
ok "with a clear message" grep -q '^outbox-relay status: cannot connect to the database: ' <<<"$ERR"
sql "CREATE ROLE cli_operator LOGIN IN ROLE outbox_operator" >/dev/null
OPERATOR_DB="host=$PGHOST port=$PGPORT dbname=$PGDATABASE user=cli_operator"
cli status 'st:1' --db "$OPERATOR_DB"
is "$RC" 0 "an operator login can read a status"
cli stuck --db "$OPERATOR_DB" --json
is "$RC" 0 "an operator login can read stuck"
cli targets --db "$OPERATOR_DB"
is "$RC" 0 "an operator login can list targets"
cli resolve 'rt:legacy' failed --note 'x' --db "$OPERATOR_DB"
is "$RC" 1 "an operator login cannot resolve: 1"
is "$(sed -n 1p <<<"$ERR")" "outbox-relay resolve: permission denied for function resolve" "permission denied, said plainly"
is "$(sed -n 2p <<<"$ERR")" "outbox-relay resolve: hint: resolve needs the outbox_admin role; an admin grants it: GRANT outbox_admin TO cli_operator;" \
    "with the role to grant"
cli retry 'rt:legacy' --db "$OPERATOR_DB"
is "$RC" 1 "an operator login cannot retry: 1"

# ---------------------------------------------------------------- retry wakes the relay
# Clear what the relay should not touch, then let it go idle with a long poll:
# it polls and reloads its targets once an hour, so a delivery within the
# bounded wait below is one the retry's NOTIFY started (no clock is read).
sql "SELECT outbox.resolve(key, 'failed', 'test setup') FROM outbox.intents WHERE state = 'unknown'" >/dev/null
sql "SELECT outbox.cancel('sk:old-pending')" >/dev/null
relay_start idle --poll-interval-ms 3600000 --targets-refresh-ms 3600000
ok "relay registers as idle" wait_for 15 "SELECT idle FROM outbox.relays WHERE relay_id = 'relay-idle'" t

sql "SELECT outbox.enqueue('wake:later', 'keyed', '{\"n\": 1}', p_not_before => now() + interval '1 hour')" >/dev/null
sleep 0.5
is "$(sql "SELECT state FROM outbox.intents WHERE key = 'wake:later'")" pending "a row due in an hour waits"
cli retry 'wake:later'
is "$RC:$OUT" "0:retry requested for 'wake:later': now pending" "retry of a pending row: 0"
ok "retry wakes the idle relay: delivered (its next poll is an hour away)" \
    wait_for 30 "SELECT state FROM outbox.intents WHERE key = 'wake:later'" succeeded

# unknown on a key-honouring target, within key_ttl: sent again with the same key
# (the receiver acted once already, and deduplicates).
sql "SELECT outbox.enqueue('wake:unknown', 'keyed', '{\"n\": 2}', p_not_before => now() + interval '1 hour')" >/dev/null
curl -s -X POST -H 'Idempotency-Key: wake:unknown' -H 'Content-Type: application/json' -d '{"n": 2}' "$URL/keyed" >/dev/null
set_state 'wake:unknown' "state = 'unknown', ambiguous = true, attempts = 1, first_attempt_at = now() - interval '1 minute',
                          last_error = 'timeout after send'"
cli retry 'wake:unknown' --by dave
is "$RC:$OUT" "0:retry requested for 'wake:unknown': now pending" "retry of unknown on a key-honouring target: 0, pending"
ok "the relay sends it again with the same key and records success" \
    wait_for 30 "SELECT state FROM outbox.intents WHERE key = 'wake:unknown'" succeeded
is "$(receiver_stat recv deduplicated_total)" 1 "the receiver saw the same key again and deduplicated it"
cli status 'wake:unknown' --json
is "$(jfield '[.status, .attempts, .response_status] | @json')" '["succeeded",2,200]' "status after the retry"

kill -TERM "$RELAY_PID_idle"; relay_wait idle 20
is "$?" 0 "relay exits 0 on SIGTERM"
ok "no sanitizer report in the relay" relay_logs_clean
itest_done
