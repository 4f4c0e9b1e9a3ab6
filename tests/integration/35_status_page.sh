#!/usr/bin/env bash
# The status page (GET /ui on the admin port) in a real headless browser
# (Debian chromium), over a relay with intents in every state: succeeded,
# pending (not due yet, and behind an open circuit), in_flight (a receiver
# that answers in a minute), failed (400), unknown (500 from a target that
# cannot deduplicate), cancelled (rejected) and awaiting_approval.
#
# What the browser must show: every target with its live states and its
# circuit (open after 410s), the stuck keys with their reasons, recent
# failures, and from the search box the whole life of one key. Keys are
# attacker text: a key holding <script>alert(1)</script> and one holding
# "><img src=x onerror=alert(1)> render as text (no script or img element in
# the DOM, the escaped text is there). No payload value, signing secret,
# header secret or admin token appears on any page. The admin token guards
# /ui (Bearer, or Basic with the token as the password, which the browser
# sends); the answers carry the Content-Security-Policy. A relay whose login
# has outbox_relay only still answers, each section naming the missing grant.
# With PostgreSQL stopped the page answers 503 at once and says why, and it is
# back once PostgreSQL is.
#
# Screenshots: build/status-page.png (the overview) and
# build/status-page-key.png (the life of a key retried twice).
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

CHROMIUM=$(command -v chromium || command -v chromium-browser) ||
    bail "chromium is not installed (tests/lib/install-deps.sh installs it)"
SHOTS="$ITEST_ROOT/build"
mkdir -p "$SHOTS"

PAYLOAD_SECRET=payload-secret-4242-never-on-the-page
TOKEN=ui-admin-token-5b1f0c9e77d2
export OUTBOX_SECRET_UI_SIGNING=whsec_dWktc2lnbmluZy1zZWNyZXQtdmFsdWUtMDEyMzQ1Njc4OQ==
export OUTBOX_SECRET_UI_HEADER=ui-header-secret-7777-never-on-the-page
XSS_SCRIPT='<script>alert(1)</script>'
XSS_IMG='"><img src=x onerror=alert(1)>'

# browser OUTPUT_OPTION URL: headless chromium, its own profile, no network
# but loopback; killed if it hangs (timeout signals it by its PID).
browser() {
    local profile
    profile=$(mktemp -d "$T/chrome.XXXXXX")
    timeout -k 5 40 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
        --user-data-dir="$profile" --no-first-run --no-default-browser-check \
        --disable-background-networking --disable-component-update --disable-sync \
        --disable-extensions --disable-default-apps --no-proxy-server \
        --window-size=1280,2000 --hide-scrollbars "$@" 2>>"$T/chromium.log"
}

# dom URL FILE: the DOM after load, serialized
dom() {
    browser --dump-dom "$1" >"$2"
}

# sql_quote TEXT → TEXT as an SQL literal
sql_quote() {
    printf "'%s'" "${1//\'/\'\'}"
}

# enqueue KEY TARGET [JSON fields] [extra arguments]: a payload with the secret in it
enqueue() {
    local fields=${3:-}
    sql "SELECT outbox.enqueue($(sql_quote "$1"), '$2',
           '{\"card\": \"$PAYLOAD_SECRET\"${fields:+, $fields}}'${4:+, $4})" >/dev/null
}

state_of() {
    sql "SELECT state FROM outbox.intents WHERE key = $(sql_quote "$1")"
}

# no_secret FILE: none of the secrets, the payload or the token in it
no_secret() {
    ! grep -qF -e "$PAYLOAD_SECRET" -e "$OUTBOX_SECRET_UI_SIGNING" -e "${OUTBOX_SECRET_UI_SIGNING#whsec_}" \
        -e "$OUTBOX_SECRET_UI_HEADER" -e "$TOKEN" "$1"
}

# target_cell FILE TARGET N → the text of the Nth cell of the target's row,
# tags stripped (1 target, 2 circuit, 3 pending, 4 in flight, 5 unknown,
# 6 awaiting approval, 7-9 succeeded, failed, cancelled in 5 min, 10 oldest
# pending, 11 success ratio, 12 p95)
target_cell() {
    grep "<tr><td class=\"name\"><code>$2</code></td>" "$1" | head -1 |
        awk -v n="$3" 'BEGIN { RS = "<td" } NR == n + 1 { sub(/<\/td>.*/, ""); sub(/^[^>]*>/, "");
                                                      gsub(/<[^>]*>/, ""); print }'
}

# Start the stopped cluster again on its port (pgcluster_start would initdb).
pg_start_again() {
    local bin
    bin=$(pgcluster_bindir) || return 1
    pgcluster_as_owner "$bin/pg_ctl" -D "$T/pg/data" -l "$T/pg/server.log" -w -t 60 \
        -o "-p $PGPORT -k $T/pg -c listen_addresses=127.0.0.1 -c fsync=off" start \
        >>"$T/pg/pg_ctl.log" 2>&1
}

# wait_page SECONDS: poll until /ui answers 200
wait_page() {
    local i
    for i in $(seq 1 $(($1 * 5))); do
        [ "$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$ADMIN/ui")" = 200 ] &&
            return 0
        sleep 0.2
    done
    return 1
}

# section FILE ID: the lines of <section id="ID"> (one element a line as the page writes it)
section() {
    sed -n "/<section id=\"$2\"/,/<\/section>/p" "$1"
}

# ---------------------------------------------------------------- receivers, targets, relay
receiver_start keyed --dedupe
receiver_start slow --dedupe --delay-ms 60000
receiver_start gone --mode-status 410
receiver_start broken --mode-status 400
receiver_start legacy --mode-status 500
target_add api "http://127.0.0.1:$RECV_PORT_keyed/calls" backoff_base_ms=200 \
    secret_env="'OUTBOX_SECRET_UI_SIGNING'" \
    "headers='{\"Authorization\": {\"env\": \"OUTBOX_SECRET_UI_HEADER\"}}'"
target_add approvals "http://127.0.0.1:$RECV_PORT_keyed/approved" approval_rule="'\$.amount_cents > 1000'"
target_add slow "http://127.0.0.1:$RECV_PORT_slow/calls" timeout_ms=120000
target_add gone "http://127.0.0.1:$RECV_PORT_gone/calls" max_in_flight=1
target_add broken "http://127.0.0.1:$RECV_PORT_broken/calls"
target_add legacy "http://127.0.0.1:$RECV_PORT_legacy/calls" key_header=NULL

# The page reads as outbox_operator (docs/operations.md): granted to the relays' login.
sql "GRANT outbox_operator TO itest_relay" >/dev/null
printf '%s\n' "$TOKEN" >"$T/token"
relay_start one --admin-listen "127.0.0.1:0" --admin-token-file "$T/token" \
    --poll-interval-ms 200 --grace-ms 1000 --reconnect-max-ms 500
ADMIN_PORT=$(relay_admin_port one)
[ -n "$ADMIN_PORT" ] || bail "the relay did not log its admin port"
ADMIN="http://127.0.0.1:$ADMIN_PORT"
# The browser signs in as a person would: Basic, any user, the token as password.
BROWSER_ADMIN="http://operator:$TOKEN@127.0.0.1:$ADMIN_PORT"

# ---------------------------------------------------------------- intents in every state
enqueue "ui:ok" api
enqueue "ui:retried" api '"_fault": "status_429", "_fault_times": 2'
enqueue "ui:approval" approvals '"amount_cents": 5000'
enqueue "ui:rejected" approvals '"amount_cents": 9000'
enqueue "ui:later" api "" "p_not_before => now() + interval '1 hour'"
enqueue "ui:slow" slow
enqueue "ui:refused" broken
enqueue "ui:lost" legacy
enqueue "$XSS_SCRIPT" legacy
enqueue "$XSS_IMG" legacy
# One transaction (OR003 once the target is disabled): 410s to 5 intents in a
# row disable it; two more, due just after them (one request at a time), wait.
sql "SELECT outbox.enqueue('ui:gone-run-' || g, 'gone', '{\"card\": \"$PAYLOAD_SECRET\"}')
       FROM generate_series(1, 5) g;
     SELECT outbox.enqueue('ui:gone-' || g, 'gone', '{\"card\": \"$PAYLOAD_SECRET\"}',
                           p_not_before => now() + interval '10 milliseconds')
       FROM generate_series(1, 2) g" >/dev/null
sql "SELECT outbox.reject('ui:rejected', 'alice', 'amount over policy')" >/dev/null
ok "the 410s opened the circuit of target gone (and disabled it)" wait_for 20 \
    "SELECT circuit <> 'closed' FROM outbox.target_state WHERE target = 'gone'" t
ok "succeeded (after two 429s)" wait_for 20 \
    "SELECT count(*) FROM outbox.intents WHERE key IN ('ui:ok', 'ui:retried') AND state = 'succeeded'" 2
ok "in flight" wait_for 20 "SELECT state FROM outbox.intents WHERE key = 'ui:slow'" in_flight
ok "failed" wait_for 20 "SELECT state FROM outbox.intents WHERE key = 'ui:refused'" failed
ok "unknown, the <script> and <img> keys too" wait_for 20 \
    "SELECT count(*) FROM outbox.intents WHERE target = 'legacy' AND state = 'unknown'" 3
is "$(state_of ui:approval)" awaiting_approval "awaiting approval"
is "$(state_of ui:rejected)" cancelled "cancelled"
is "$(state_of ui:later)" pending "pending (not due for an hour)"
is "$(state_of ui:gone-2)" pending "pending behind the open circuit"
is "$(state_of ui:gone-1)" pending "pending behind the open circuit, the other one too"
is "$(sql "SELECT count(DISTINCT state) FROM outbox.intents")" 7 "all seven states are there"

# ---------------------------------------------------------------- HTTP: auth and headers
status=$(curl -s -m 10 -o "$T/unauth.html" -D "$T/unauth.headers" -w '%{http_code}' "$ADMIN/ui")
is "$status" 401 "/ui without the token: 401"
ok "401 asks the browser for Basic credentials" grep -qi '^WWW-Authenticate: Basic realm=' "$T/unauth.headers"
ok "401 is an HTML page" grep -qi '^Content-Type: text/html' "$T/unauth.headers"
ok "401 names no relay" bash -c "! grep -q 'relay-one' '$T/unauth.html'"
status=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer wrong" "$ADMIN/ui")
is "$status" 401 "/ui with a wrong token: 401"
status=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -u "x:wrong" "$ADMIN/ui")
is "$status" 401 "/ui with a wrong Basic password: 401"
status=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -u "x:$TOKEN" "$ADMIN/metrics")
is "$status" 401 "Basic is for /ui only: /metrics still wants Bearer"
status=$(curl -s -m 10 -o "$T/curl.html" -D "$T/ui.headers" -w '%{http_code}' \
    -H "Authorization: Bearer $TOKEN" "$ADMIN/ui")
is "$status" 200 "/ui with the bearer token: 200"
ok "Content-Type: text/html; charset=utf-8" grep -qi '^Content-Type: text/html; charset=utf-8' "$T/ui.headers"
ok "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; form-action 'self'" \
    grep -qi "^Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; form-action 'self'" "$T/ui.headers"
ok "X-Content-Type-Options: nosniff" grep -qi '^X-Content-Type-Options: nosniff' "$T/ui.headers"
ok "Cache-Control: no-store" grep -qi '^Cache-Control: no-store' "$T/ui.headers"
ok "it refreshes itself" grep -q '<meta http-equiv="refresh" content="5">' "$T/curl.html"
ok "no script, no external asset" bash -c "! grep -qiE '<script|<link|src=\"http|url\\(' '$T/curl.html'"
ok "no secret in the HTML" no_secret "$T/curl.html"

# ---------------------------------------------------------------- the overview in the browser
dom "$BROWSER_ADMIN/ui" "$T/overview.dom"
ok "the browser loaded the page (Basic auth from the URL)" grep -q '<section id="targets"' "$T/overview.dom"
for target in api approvals slow gone broken legacy; do
    ok "target $target is listed" grep -q "<tr><td class=\"name\"><code>$target</code></td>" "$T/overview.dom"
done
ok "target gone: circuit open, disabled, since when and why" \
    grep -qE '^open disabled ?since [0-9-]+ [0-9:]+ UTC: HTTP 410' <<<"$(target_cell "$T/overview.dom" gone 2)"
is "$(target_cell "$T/overview.dom" gone 3)" 2 "target gone: 2 pending"
is "$(target_cell "$T/overview.dom" api 2)" closed "target api: circuit closed"
is "$(target_cell "$T/overview.dom" api 3)" 1 "target api: 1 pending"
is "$(target_cell "$T/overview.dom" api 7)" 2 "target api: 2 succeeded in 5 min"
ok "target api: a success ratio (2 of 4 attempts)" \
    grep -qE '^50\.0 %of 4 attempts$' <<<"$(target_cell "$T/overview.dom" api 11)"
ok "target api: a p95 latency" grep -qE '^[0-9]+\.[0-9] ms$' <<<"$(target_cell "$T/overview.dom" api 12)"
is "$(target_cell "$T/overview.dom" approvals 6)" 1 "target approvals: 1 awaiting approval"
is "$(target_cell "$T/overview.dom" approvals 9)" 1 "target approvals: 1 cancelled in 5 min"
is "$(target_cell "$T/overview.dom" slow 4)" 1 "target slow: 1 in flight"
is "$(target_cell "$T/overview.dom" broken 8)" 1 "target broken: 1 failed in 5 min"
is "$(target_cell "$T/overview.dom" legacy 5)" 3 "target legacy: 3 unknown"
section "$T/overview.dom" stuck >"$T/stuck.dom"
ok "stuck: ui:lost, outcome unknown" grep -qE 'ui:lost</a>.*outcome unknown' "$T/stuck.dom"
ok "stuck: ui:gone-2, target unavailable (circuit open)" \
    grep -qE 'ui:gone-2</a>.*target unavailable since .* \(circuit open' "$T/stuck.dom"
ok "stuck: a count in the heading" grep -qE '<h2>Stuck keys \([0-9]+\)</h2>' "$T/stuck.dom"
section "$T/overview.dom" failures >"$T/failures.dom"
ok "recent failures: ui:refused, permanent_failure, HTTP 400" \
    grep -qE 'ui:refused</a>.*permanent_failure.*<td class="n">400</td>' "$T/failures.dom"
ok "recent failures: ui:retried, retry_later, HTTP 429" \
    grep -qE 'ui:retried</a>.*retry_later.*<td class="n">429</td>' "$T/failures.dom"
ok "recent failures: ui:lost, ambiguous, HTTP 500" grep -qE 'ui:lost</a>.*ambiguous.*<td class="n">500</td>' "$T/failures.dom"
ok "the search box is a GET form to /ui/intents" \
    grep -q '<form class="search" method="get" action="/ui/intents"' "$T/overview.dom"

# The keys that are markup: text in the DOM, never elements.
ok "no script element in the DOM" bash -c "! grep -qi '<script' '$T/overview.dom'"
ok "no img element in the DOM" bash -c "! grep -qi '<img' '$T/overview.dom'"
ok "the <script> key shows as text" grep -qF '&lt;script&gt;alert(1)&lt;/script&gt;</a>' "$T/stuck.dom"
ok "the <img> key shows as text" grep -qF '"&gt;&lt;img src=x onerror=alert(1)&gt;</a>' "$T/stuck.dom"
ok "its link is percent-encoded" \
    grep -qF 'href="/ui/intents/%3Cscript%3Ealert%281%29%3C%2Fscript%3E"' "$T/stuck.dom"
ok "no secret on the overview" no_secret "$T/overview.dom"
rm -f "$SHOTS/status-page.png"
browser --screenshot="$SHOTS/status-page.png" "$BROWSER_ADMIN/ui" >/dev/null
ok "screenshot build/status-page.png" test -s "$SHOTS/status-page.png"

# ---------------------------------------------------------------- one key's life, from the search box
dom "$BROWSER_ADMIN/ui/intents?key=ui%3Aretried" "$T/retried.dom"
ok "the search answers with the key's page" grep -q '<h1>Key ui:retried</h1>' "$T/retried.dom"
ok "its status: succeeded" grep -q '<dt>status</dt><dd><span class="badge ok">succeeded</span>' "$T/retried.dom"
section "$T/retried.dom" attempts >"$T/retried-attempts.dom"
ok "3 attempts" grep -q '<h2>Attempts (3)</h2>' "$T/retried-attempts.dom"
is "$(grep -o 'badge [a-z]*">[a-z_]*<' "$T/retried-attempts.dom" | sed 's/.*">//; s/<//' | tr '\n' ' ')" \
    "retry_later retry_later succeeded " "in order: retry_later, retry_later, succeeded"
ok "the response body, escaped" grep -qF '{"ok":true,"key":"ui:retried","effect":1}' "$T/retried-attempts.dom"
ok "no secret on the key page" no_secret "$T/retried.dom"
rm -f "$SHOTS/status-page-key.png"
browser --screenshot="$SHOTS/status-page-key.png" "$BROWSER_ADMIN/ui/intents/ui%3Aretried" >/dev/null
ok "screenshot build/status-page-key.png" test -s "$SHOTS/status-page-key.png"

dom "$BROWSER_ADMIN/ui/intents?key=%3Cscript%3Ealert%281%29%3C%2Fscript%3E" "$T/xss.dom"
ok "the <script> key's page: its title as text" grep -qF '<h1>Key &lt;script&gt;alert(1)&lt;/script&gt;</h1>' "$T/xss.dom"
ok "its page: no script element" bash -c "! grep -qi '<script' '$T/xss.dom'"
ok "its page: the search box holds the key as a value" \
    grep -qF 'value="&lt;script&gt;alert(1)&lt;/script&gt;"' "$T/xss.dom"
ok "its attempts: ambiguous, 500" grep -qE 'ambiguous.*<td class="n">500</td>' "$T/xss.dom"
dom "$BROWSER_ADMIN/ui/intents/%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E" "$T/img.dom"
ok "the <img> key's page: no img element" bash -c "! grep -qi '<img' '$T/img.dom'"
ok "the <img> key's page: the key as text" grep -qF '<code>"&gt;&lt;img src=x onerror=alert(1)&gt;</code>' "$T/img.dom"
dom "$BROWSER_ADMIN/ui/intents/ui%3Aslow" "$T/slow.dom"
ok "an in-flight key shows its lease owner" grep -q '<dt>lease owner</dt><dd>relay-one</dd>' "$T/slow.dom"
for key in ui:ok ui:approval ui:rejected ui:later ui:refused ui:gone-2; do
    curl -s -m 10 -H "Authorization: Bearer $TOKEN" "$ADMIN/ui/intents/$key" >"$T/key.html"
    ok "no secret on the page of $key" no_secret "$T/key.html"
done
ok "a rejected key says who decided" grep -q 'alice' <(curl -s -m 10 -H "Authorization: Bearer $TOKEN" "$ADMIN/ui/intents/ui:rejected")
status=$(curl -s -m 10 -o "$T/404.html" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$ADMIN/ui/intents/no-such-key")
is "$status" 404 "an unknown key: 404"
ok "an unknown key: says so" grep -q 'No intent has this key' "$T/404.html"
status=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$ADMIN/ui/intents/a%0Ab")
is "$status" 400 "a key with a control character: 400"

# ---------------------------------------------------------------- a login without outbox_operator
# Deployed relays log in with outbox_relay only; the page's sections then say
# which grant is missing (the outcome, which outbox_relay may read, still shows).
sql "CREATE ROLE ui_relay_only LOGIN IN ROLE outbox_relay" >/dev/null
relay_start limited --admin-listen "127.0.0.1:0" --poll-interval-ms 1000 \
    --db "postgresql://ui_relay_only@127.0.0.1:$PGPORT/$PGDATABASE"
LIMITED="http://127.0.0.1:$(relay_admin_port limited)"
status=$(curl -s -m 10 -o "$T/limited.html" -w '%{http_code}' "$LIMITED/ui")
is "$status" 200 "outbox_relay only: the page still answers"
is "$(grep -c 'grant it the outbox_operator role' "$T/limited.html")" 4 \
    "outbox_relay only: each overview section names the missing grant"
curl -s -m 10 -o "$T/limited-key.html" "$LIMITED/ui/intents/ui:refused"
ok "outbox_relay only: the key's outcome shows" grep -q '<span class="badge bad">failed</span>' "$T/limited-key.html"
is "$(grep -c 'grant it the outbox_operator role' "$T/limited-key.html")" 2 \
    "outbox_relay only: its details and attempts name the missing grant"
kill -TERM "$RELAY_PID_limited"
relay_wait limited 20
is "$?" 0 "that relay exits 0 on SIGTERM"

# ---------------------------------------------------------------- the database stopped: 503, at once
pgcluster_stop "$T/pg"
status=$(curl -s -m 20 -o "$T/503.html" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$ADMIN/ui")
is "$status" 503 "database stopped: 503, not a hang (curl gives up after 20 s: 000)"
ok "the 503 page says the database cannot be reached" grep -q 'The database cannot be reached' "$T/503.html"
ok "and names no host or port" bash -c "! grep -qF -e '$PGPORT' -e 'server at' '$T/503.html'"
dom "$BROWSER_ADMIN/ui" "$T/503.dom"
ok "the browser shows the 503 page" grep -q 'The database cannot be reached' "$T/503.dom"
ok "it refreshes itself until the database is back" grep -q 'http-equiv="refresh"' "$T/503.dom"
ok "PostgreSQL started again" pg_start_again
ok "the page is back with the database" wait_page 30

kill -TERM "$RELAY_PID_one"
relay_wait one 30
is "$?" 0 "relay exits 0 on SIGTERM"
ok "the token is not in the log" bash -c "! grep -qF -- '$TOKEN' '$T/relay-one.log'"
ok "no sanitizer report" relay_logs_clean
itest_done
