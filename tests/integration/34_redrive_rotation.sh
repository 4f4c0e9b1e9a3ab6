#!/usr/bin/env bash
# Issue 15, items 4 and 5: safe redrive and signing-secret rotation.
#
# Rotation: the variable that secret_env names holds one secret, then the old
# and the new one (the relay restarted with each), then only the new one. A
# Standard Webhooks verifier (python3, below) that knows only the old
# secret, then only the new one, accepts every request; a verifier that
# knows neither (a third secret, checked on every request) accepts none, and
# when it is the one answering, its 401s leave the intent failed. No secret
# value ever reaches a log.
#
# Redrive: a target that answered 400 and then refused connections for a
# while; its rows end failed. The target is fixed; `redrive --dry-run` lists
# exactly them, `redrive` moves them, and the relay delivers each exactly
# once (the receiver counts effects). Rows whose request may have executed
# (a late answer after the timeout, then a 400: unknown; the same resolved
# failed by a person) are never moved, nor rows outside the window or of
# another target. The CLI's exit codes and least privilege.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

# cli ARGS... → RC, OUT (stdout), ERR (stderr); the outputs also go to cli.log
cli() {
    "$RELAY_BIN" "$@" >"$T/cli.out" 2>"$T/cli.err"
    RC=$?
    OUT=$(cat "$T/cli.out")
    ERR=$(cat "$T/cli.err")
    cat "$T/cli.out" "$T/cli.err" >>"$T/cli.log"
}
jfield() { jq -r "$1" <"$T/cli.out"; }
state_of() { sql "SELECT state FROM outbox.intents WHERE key = '$1'"; }

# ============================================================== rotation
# A Standard Webhooks verifier: accepts a request if one entry of its
# webhook-signature verifies with a secret it knows and the timestamp is
# within 5 minutes; 401 otherwise. POST /_knows {"secrets": [...], "phase":
# "..."} sets what it knows; GET /_log lists every request it judged, with
# what a verifier knowing only the stranger secret (argv[1]) would have said.
cat >"$T/verifier.py" <<'EOF'
import base64, hashlib, hmac, json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STRANGER = sys.argv[1]
state = {"knows": [], "phase": "", "log": []}
lock = threading.Lock()

def key_of(secret):
    return base64.b64decode(secret[6:], validate=True) if secret.startswith("whsec_") else secret.encode()

def verifies(secret, msg_id, ts, body, header):
    content = msg_id.encode() + b"." + ts.encode() + b"." + body
    want = base64.b64encode(hmac.new(key_of(secret), content, hashlib.sha256).digest()).decode()
    for entry in header.split(" "):
        version, _, signature = entry.partition(",")
        if version == "v1" and hmac.compare_digest(signature, want):
            return True
    return False

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, doc):
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        with lock:
            doc = list(state["log"])
        self.reply(200, doc) if self.path == "/_log" else self.reply(404, {"error": "not found"})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/_knows":
            doc = json.loads(body)
            with lock:
                state["knows"], state["phase"] = doc["secrets"], doc["phase"]
            return self.reply(200, {"ok": True})
        msg_id = self.headers.get("webhook-id", "")
        ts = self.headers.get("webhook-timestamp", "")
        header = self.headers.get("webhook-signature", "")
        fresh = ts.isdigit() and abs(time.time() - int(ts)) <= 300
        with lock:
            knows, phase = list(state["knows"]), state["phase"]
        accepted = fresh and any(verifies(s, msg_id, ts, body, header) for s in knows)
        stranger = fresh and verifies(STRANGER, msg_id, ts, body, header)
        entries = header.split(" ")
        with lock:
            state["log"].append({"key": msg_id, "phase": phase, "accepted": accepted,
                                 "stranger_accepted": stranger, "entries": len(entries),
                                 "well_formed": all(e.startswith("v1,") and len(e) == 47 for e in entries)})
        self.reply(200 if accepted else 401, {"ok": accepted, "key": msg_id})

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("listening 127.0.0.1:%d" % server.server_address[1], flush=True)
server.serve_forever()
EOF

new_secret() { echo "whsec_$(openssl rand -base64 24)"; }
OLD=$(new_secret)
NEW=$(new_secret)
STRANGER=$(new_secret)
python3 "$T/verifier.py" "$STRANGER" >"$T/verifier.out" 2>"$T/verifier.err" &
ITEST_PIDS+=("$!")
for i in $(seq 1 100); do
    VERIFIER_PORT=$(sed -n 's/^listening 127.0.0.1://p' "$T/verifier.out")
    [ -n "$VERIFIER_PORT" ] && break
    sleep 0.05
done
[ -n "$VERIFIER_PORT" ] || bail "the verifier did not start"
VERIFIER="http://127.0.0.1:$VERIFIER_PORT"
knows() { # knows PHASE SECRET...
    local phase=$1; shift
    curl -s -X POST -d "$(jq -cn --arg p "$phase" '{phase: $p, secrets: $ARGS.positional}' --args "$@")" \
        "$VERIFIER/_knows" >/dev/null
}
vlog() { curl -s "$VERIFIER/_log"; }
target_add signed "$VERIFIER/hooks" secret_env="'OUTBOX_SECRET_ROTATE'"

# deliver_phase NAME FROM TO: enqueue signed:FROM..TO, run a relay until idle
deliver_phase() {
    local g
    for g in $(seq "$2" "$3"); do
        sql "SELECT outbox.enqueue('signed:$g', 'signed', '{\"n\": $g, \"text\": \"café\"}')" >/dev/null
    done
    relay_start "$1" --exit-when-idle --poll-interval-ms 100
    relay_wait "$1" 60
}
# phase_ok PHASE N ENTRIES: the verifier judged N requests in PHASE, accepted
# all, each with ENTRIES well-formed v1 entries; the stranger accepted none
phase_ok() {
    vlog | jq -e --arg p "$1" --argjson n "$2" --argjson e "$3" \
        '[.[] | select(.phase == $p)] | length == $n and all(.accepted and (.stranger_accepted | not)
                                                             and .entries == $e and .well_formed)' >/dev/null
}

export OUTBOX_SECRET_ROTATE="$OLD"
knows old-only "$OLD"
deliver_phase rot1 1 5
is "$?" 0 "one secret: the relay drains and exits"
ok "verifier knowing the old secret: 5 of 5 accepted, one entry each; the stranger accepts none" phase_ok old-only 5 1

export OUTBOX_SECRET_ROTATE="$OLD $NEW"
deliver_phase rot2 6 10
is "$?" 0 "old and new: the relay drains and exits"
is "$(vlog | jq '[.[] | select(.phase == "old-only" and .entries == 2 and .well_formed and .accepted
                                and (.stranger_accepted | not))] | length')" 5 \
    "old and new, verifier still knowing only the old one: 5 of 5 accepted, two entries each"
ok "the relay logs how many secrets sign (2), never which" \
    grep -q '"event":"target_signing","target":"signed","secret_env":"OUTBOX_SECRET_ROTATE","secrets":2' "$T/relay-rot2.log"
knows new-only "$NEW"
deliver_phase rot3 11 15
ok "the receiver moves to the new secret: 5 of 5 accepted, two entries each" phase_ok new-only 5 2

export OUTBOX_SECRET_ROTATE="$NEW"
deliver_phase rot4 16 20
is "$(vlog | jq '[.[] | select(.phase == "new-only" and .entries == 1 and .accepted)] | length')" 5 \
    "the old secret removed: one entry, accepted by the verifier knowing only the new one"
is "$(vlog | jq '[.[] | select(.accepted)] | length'):$(vlog | jq 'length')" "20:20" \
    "all 20 requests of the rotation accepted, no retry needed"
is "$(vlog | jq '[.[] | select(.stranger_accepted)] | length')" 0 "a verifier that knows neither secret accepts none"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'signed' AND state = 'succeeded' AND attempts = 1")" 20 \
    "20 intents succeeded with one attempt each"

# The verifier that knows neither answers: 401, the intent failed (redriven below).
knows neither "$STRANGER"
deliver_phase rot5 21 21
is "$(vlog | jq -c '[.[] | select(.phase == "neither") | .accepted]')" '[false]' \
    "a verifier that knows neither secret rejects the request"
is "$(state_of signed:21):$(sql "SELECT response_status FROM outbox.intents WHERE key = 'signed:21'")" "failed:401" \
    "its 401 leaves the intent failed"
SIGNED_FAILED_AT=$(sql "SELECT updated_at FROM outbox.intents WHERE key = 'signed:21'")

# ============================================================== redrive
receiver_start recv --late-ms 4000
URL="http://127.0.0.1:$RECV_PORT_recv"
refusing_port closed_port
mode() { curl -s -X POST -d "$1" "$URL/_mode" >/dev/null; }
# key_ttl as by default: an ambiguous attempt may be re-sent with the same key
# within retry_for (3 s); the circuit never opens, so refused rows use it up.
common=(timeout_ms=1500 "retry_for='3 seconds'" backoff_base_ms=100 backoff_cap_ms=200
        circuit_failure_threshold=100000)
target_add flaky "$URL/effects" "${common[@]}"
target_add other "$URL/effects" "${common[@]}"
enqueue() { # enqueue KEY TARGET [PAYLOAD]
    local doc=${3:-'{}'}
    sql "SELECT outbox.enqueue('$1', '$2', '$doc')" >/dev/null
}
all_settled() { # all_settled KEY...: none pending or in flight
    local k list=""
    for k in "$@"; do list="$list${list:+, }'$k'"; done
    [ "$(sql "SELECT count(*) FROM outbox.intents WHERE key IN ($list) AND state IN ('pending', 'in_flight')")" = 0 ]
}
wait_settled() { # wait_settled SECONDS KEY...
    local limit=$1 i; shift
    for i in $(seq 1 $((limit * 10))); do
        all_settled "$@" && return 0
        sleep 0.1
    done
    return 1
}

export OUTBOX_SECRET_ROTATE="$NEW"
relay_start main --poll-interval-ms 100 --targets-refresh-ms 100

# Before the window: a 400.
mode '{"status": 400}'
enqueue early:1 flaky
ok "a row failed before the window" wait_for 10 "SELECT state FROM outbox.intents WHERE key = 'early:1'" failed
sleep 0.2
SINCE=$(sql "SELECT now()")
sleep 0.2

# Doubt: the request arrives and acts, its answer comes after the timeout
# (late); the same key is sent again and gets a 400: unknown, never failed.
mode '{}'
enqueue amb:1 flaky '{"_fault": "late"}'
enqueue amb:2 flaky '{"_fault": "late"}'
for i in $(seq 1 50); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/_requests/amb:1")$(curl -s -o /dev/null -w '%{http_code}' "$URL/_requests/amb:2")" = 200200 ] && break
    sleep 0.05
done
mode '{"status": 400}' # broken from here: every request gets a 400
enqueue bad:1 flaky
enqueue bad:2 flaky
enqueue bad:3 flaky
enqueue other:1 other
ok "the 400s and the late answers settle" wait_settled 20 amb:1 amb:2 bad:1 bad:2 bad:3 other:1
is "$(state_of amb:1):$(state_of amb:2)" "unknown:unknown" "a late answer, then a 400: unknown (the first may have acted)"
is "$(sql "SELECT string_agg(a.class || '/' || coalesce(a.http_status::text, '-'), ' ' ORDER BY a.id)
             FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'amb:1'")" \
    "ambiguous/- permanent_failure/400" "amb:1's history: an ambiguous attempt, then a 400"
cli resolve amb:2 failed --note "the payments console shows no charge"
is "$RC" 0 "a person resolves amb:2 as failed"
is "$(state_of amb:2)" failed "amb:2 is failed, after an attempt that may have executed"

# Refused connections: the target's URL points where nothing listens.
sql "UPDATE outbox.targets SET url = 'http://127.0.0.1:$closed_port/effects' WHERE name = 'flaky'" >/dev/null
sleep 2 # the relay reloads targets at its maintenance tick (every second) once 100 ms passed
enqueue down:1 flaky
enqueue down:2 flaky
enqueue down:3 flaky
ok "refused until retry_for is over: failed" wait_settled 20 down:1 down:2 down:3
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'down:%' AND state = 'failed' AND attempts > 1")" 3 \
    "the refused rows failed after several attempts"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.key LIKE 'down:%' AND NOT (a.class = 'not_sent' AND a.request_sent = false)")" 0 \
    "every attempt of theirs: not_sent, nothing sent"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'bad:%' AND state = 'failed' AND response_status = 400")" 3 \
    "the 400 rows failed"
sleep 0.2
UNTIL=$(sql "SELECT now()")
sleep 0.2
enqueue late:1 flaky
ok "a row failed after the window" wait_for 10 "SELECT state FROM outbox.intents WHERE key = 'late:1'" failed

# The target is fixed.
mode '{}'
sql "UPDATE outbox.targets SET url = '$URL/effects' WHERE name = 'flaky'" >/dev/null
sleep 2
snapshot() { sql "SELECT key || ' ' || state || ' ' || attempts || ' ' || updated_at FROM outbox.intents ORDER BY key"; }
attempt_rows() { sql "SELECT count(*) FROM outbox.attempts"; }
before=$(snapshot)
before_attempts=$(attempt_rows)

# ---------------------------------------------------------------- dry run
cli redrive --target flaky --since "$SINCE" --until "$UNTIL" --dry-run --json
is "$RC" 0 "redrive --dry-run --json: 0"
is "$(jfield '[.intents[].key] | sort | @json')" '["bad:1","bad:2","bad:3","down:1","down:2","down:3"]' \
    "the dry run lists exactly the rows the broken target refused or never received"
is "$(jfield '[.dry_run, .would_redrive, .left_failed, .limit_reached] | @json')" '[true,6,1,false]' \
    "--json: a dry run, 6 would go, 1 other failed row of the window stays (amb:2)"
is "$(jfield '[.intents[].settled_at] == ([.intents[].settled_at] | sort)')" true "oldest settled first"
is "$(jfield '[.intents[] | select(.key | startswith("bad:")) | .last_error] | unique | @json')" '["HTTP 400"]' \
    "with their last error"
cli redrive --target flaky --since "$SINCE" --until "$UNTIL" --dry-run
is "$RC" 0 "redrive --dry-run: 0"
is "$(head -1 <<<"$OUT" | tr -s ' ')" "KEY TARGET SETTLED_AT ATTEMPTS LAST_ERROR" "text: a table"
is "$(grep -c '^\(bad\|down\):[0-9] ' <<<"$OUT")" 6 "text: one line per intent"
ok "text: the count and the window" grep -q "^dry run: would redrive 6 failed intents of target 'flaky' settled in \[" <<<"$OUT"
ok "text: the row left failed is counted" grep -q "^1 other failed intent of the target in the window stays failed" <<<"$OUT"
is "$(snapshot)" "$before" "the dry run changed no intent"
is "$(attempt_rows)" "$before_attempts" "and wrote no history"

# ---------------------------------------------------------------- usage, privileges
cli redrive --target flaky --since "$SINCE"
is "$RC:$OUT" "2:" "no --until: usage error (2), nothing on stdout"
is "$(head -1 <<<"$ERR")" "outbox-relay redrive: missing --until" "naming what is missing"
cli redrive --target flaky --since "yesterday at noon" --until "$UNTIL"
is "$RC" 2 "a time the database cannot read: 2"
cli redrive --target flaky --since "$UNTIL" --until "$SINCE"
is "$RC" 2 "since after until: 2"
cli redrive --target nope --since "$SINCE" --until "$UNTIL"
is "$RC:$ERR" "2:outbox-relay redrive: outbox.redrive: unknown target 'nope'
outbox-relay redrive: hint: outbox-relay targets lists them." "an unknown target: 2"
cli redrive --target flaky --since "$SINCE" --until "$UNTIL" --limit 0
is "$RC" 2 "--limit 0: 2"
cli redrive --help
is "$(head -1 <<<"$OUT")" \
    "usage: outbox-relay redrive --target NAME --since TIME --until TIME [--limit N] [--by NAME] [--dry-run] [--json] [connection options]" \
    "redrive --help prints its usage"
cli --help
ok "--help lists redrive" grep -q '^  redrive --target NAME --since TIME --until TIME' <<<"$OUT"
sql "CREATE ROLE redrive_operator LOGIN IN ROLE outbox_operator" >/dev/null
cli redrive --target flaky --since "$SINCE" --until "$UNTIL" --dry-run \
    --db "host=$PGHOST port=$PGPORT dbname=$PGDATABASE user=redrive_operator"
is "$RC:$ERR" "1:outbox-relay redrive: permission denied for function redrive
outbox-relay redrive: hint: redrive needs the outbox_admin role; an admin grants it: GRANT outbox_admin TO redrive_operator;" \
    "an operator login cannot redrive, not even a dry run: 1, and the hint names the role to grant"
is "$(snapshot)" "$before" "still nothing changed"

# ---------------------------------------------------------------- redrive
sql "CREATE ROLE redrive_admin LOGIN IN ROLE outbox_admin" >/dev/null
REDRIVE_AT=$(sql "SELECT now()")
cli redrive --target flaky --since "$SINCE" --until "$UNTIL" --by ops-alice --json \
    --db "host=$PGHOST port=$PGPORT dbname=$PGDATABASE user=redrive_admin"
is "$RC" 0 "an admin login redrives: 0"
is "$(jfield '[.dry_run, .redriven, .left_failed] | @json')" '[false,6,1]' "--json: 6 redriven, 1 left failed"
is "$(jfield '[.intents[].key] | sort | @json')" '["bad:1","bad:2","bad:3","down:1","down:2","down:3"]' \
    "the same rows as the dry run"
ok "the relay delivers them" wait_for 20 \
    "SELECT count(*) FROM outbox.intents WHERE key ~ '^(bad|down):' AND state = 'succeeded'" 6
effects_table recv
is "$(sql "SELECT string_agg(key || '=' || n, ' ' ORDER BY key) FROM effects")" \
    "amb:1=1 amb:2=1 bad:1=1 bad:2=1 bad:3=1 down:1=1 down:2=1 down:3=1" \
    "each redriven intent acted exactly once; amb:1 and amb:2 only by their first (late) request"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key ~ '^(bad|down):' AND attempts = 1")" 6 \
    "each delivered by the first attempt of its new life"
is "$(state_of amb:1):$(state_of amb:2):$(state_of early:1):$(state_of late:1):$(state_of other:1)" \
    "unknown:failed:failed:failed:failed" \
    "never moved: unknown, failed after an ambiguous attempt, before or after the window, another target"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.key ~ '^(amb|early|late|other):' AND a.at > '$REDRIVE_AT'::timestamptz")" 0 \
    "and nothing of theirs was sent again"
is "$(sql "SELECT count(DISTINCT i.key) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE a.class = 'resolved' AND a.relay = 'ops-alice' AND a.request_sent = false
              AND a.error LIKE 'redriven by ops-alice (session user redrive_admin): failed -> pending, a fresh delivery%'")" 6 \
    "one history row per redriven intent, naming who and the session user"
is "$(sql "SELECT string_agg(a.class::text, ' ' ORDER BY a.id)
             FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'bad:2'")" \
    "permanent_failure resolved succeeded" "bad:2's history reads as one life: the 400, the redrive, the delivery"
ok "the history row keeps the last error" grep -q 'after 1 attempt(s), none of which may have executed; counted from 0 again); last error: HTTP 400$' \
    <<<"$(sql "SELECT a.error FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
                WHERE i.key = 'bad:2' AND a.class = 'resolved'")"
cli redrive --target flaky --since "$SINCE" --until "$UNTIL"
is "$RC:$(tail -1 <<<"$OUT")" \
    "0:1 other failed intent of the target in the window stays failed: an attempt may have executed (outbox-relay status KEY; a person decides), or another session held it" \
    "a second redrive moves nothing, and says what stays"
ok "and its first line says 0" grep -q "^redriven 0 failed intents of target 'flaky'" <<<"$OUT"

# The signed intent the stranger-only verifier refused: the receiver fixed, redriven, accepted.
knows new-only-again "$NEW"
cli redrive --target signed --since "$SIGNED_FAILED_AT" --until now
is "$RC:$(head -2 <<<"$OUT" | tail -1 | cut -d' ' -f1)" "0:signed:21" "the refused signed intent is redriven"
ok "and accepted by the verifier knowing the new secret" wait_for 20 \
    "SELECT state FROM outbox.intents WHERE key = 'signed:21'" succeeded
is "$(vlog | jq -c '[.[] | select(.phase == "new-only-again") | .accepted]')" '[true]' "one request, accepted"

kill -TERM "$RELAY_PID_main"
relay_wait main 20
is "$?" 0 "the relay exits 0"

# ---------------------------------------------------------------- no secret in any log
leaks=""
for s in "$OLD" "$NEW" "$STRANGER"; do
    leaks="$leaks$(grep -lF -e "$s" -e "${s#whsec_}" "$T"/relay-*.log "$T/cli.log")"
done
is "$leaks" "" "no secret value (whole, or its base64) in any relay log or CLI output"
ok "the relay logs did get written" grep -q '"event":"idle_exit"' "$T/relay-rot1.log"
ok "no sanitizer report" relay_logs_clean
itest_done
