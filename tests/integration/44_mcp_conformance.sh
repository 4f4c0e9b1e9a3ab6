#!/usr/bin/env bash
# The MCP front door against the official conformance suite's SERVER
# scenarios: 0.1.16 at 2025-11-25, and 0.2.0-alpha.12 with --requirements
# 2025-11-25 and --requirements 2026-07-28 (which also runs the tasks
# extension's scenarios). tests/mcp/conformance-expected-<revision>.yaml list
# what the front door deliberately does not offer (resources, prompts,
# sampling, elicitation, logging, completions, progress, SSE...); every other
# scenario must pass, and a listed one that starts passing fails too. One TAP
# line per scenario and run (tests/mcp/conformance_tap.py), and the suite's own
# verdict with the expected-failures file.
#
# The suite cannot send an Authorization header (no option, no environment
# variable in either version), and the front door answers 401 without one.
# So the suite talks to tests/mcp/cut_proxy.py --no-cut, which sets the
# client's bearer token on every request and passes everything else (Host,
# Origin, bodies, answers) as it is; the first check shows the suite refused
# straight at the front door.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

ok "Node 22 and the official MCP packages are installed (tests/lib/install-node.sh)" \
    bash -c "'$ITEST_ROOT/tests/lib/install-node.sh' 2>'$T/install-node.err'"
[ "$TAP_FAILED" = 0 ] || { sed 's/^/# /' "$T/install-node.err"; bail "no Node 22 or no MCP packages: cannot run"; }
. "$ITEST_ROOT/tests/lib/install-node.sh"
SUITE_0116=$SDK_DIR/node_modules/conformance-0.1.16/dist/index.js
SUITE_ALPHA=$SDK_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js

# ---- the fixture ---------------------------------------------------------------------------
# The tools the scenarios call by name, each a real delivery through a relay.
# The suite sends no idempotency key, so every fixture tool has server_keys =
# true (the front door mints a key per call; no dedupe of the host's retries).
# That is for these conformance runs only: the tools of 42 and 43 need keys.
#   echo, greet, test_simple_text  a receiver that answers 200 at once
#                                  (echo sorts first: http-header-validation calls the first tool)
#   test_error_handling            a receiver that answers 400: failed, isError
#   slow_compute                   a receiver that takes 2.5 s; {"seconds" > 10} waits for
#                                  approval (approval_rule), so a cancel finds it unsent
#   failing_job                    a server that answers 400 after 1.5 s: a task that ends in
#                                  a tool error
# The front door waits 1 s (--mcp-wait-ms 1000): a client with the tasks
# extension gets a task for the slow tools, one without gets the status.
receiver_start ok --dedupe
receiver_start rejects --mode-status 400
receiver_start slow --dedupe --delay-ms 2500
python3 -c 'import http.server, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(1.5)
        body = b"{\"error\":\"rejected after 1.5 s\"}"
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print("listening 127.0.0.1:%d" % s.server_address[1], flush=True)
s.serve_forever()' >"$T/slow-fail.out" 2>&1 &
ITEST_PIDS+=("$!")
SLOW_FAIL_PORT=""
for i in $(seq 1 100); do
    SLOW_FAIL_PORT=$(sed -n 's/^listening 127.0.0.1://p' "$T/slow-fail.out")
    [ -n "$SLOW_FAIL_PORT" ] && break
    sleep 0.05
done
[ -n "$SLOW_FAIL_PORT" ] || bail "the slow failing server did not start"

target_add conf_ok "http://127.0.0.1:$RECV_PORT_ok/conformance"
target_add conf_rejects "http://127.0.0.1:$RECV_PORT_rejects/conformance" max_attempts=1
target_add conf_slow "http://127.0.0.1:$RECV_PORT_slow/conformance" "approval_rule='\$.seconds > 10'"
target_add conf_slow_fail "http://127.0.0.1:$SLOW_FAIL_PORT/conformance" max_attempts=1
sql "INSERT INTO outbox.mcp_tools (tool, target, description, server_keys) VALUES
       ('echo', 'conf_ok', 'Conformance fixture: one delivery, its outcome.', true),
       ('greet', 'conf_ok', 'Conformance fixture: one delivery, its outcome.', true),
       ('test_simple_text', 'conf_ok', 'Conformance fixture: one delivery, its outcome as text.', true),
       ('test_error_handling', 'conf_rejects', 'Conformance fixture: a delivery the target rejects (400).', true),
       ('slow_compute', 'conf_slow', 'Conformance fixture: a delivery that takes 2.5 s, or waits for approval.', true),
       ('failing_job', 'conf_slow_fail', 'Conformance fixture: a delivery rejected after 1.5 s.', true)" >/dev/null
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('conformance', '$TOKEN')" >/dev/null
sql "CREATE ROLE front_door LOGIN; GRANT outbox_mcp TO front_door" >/dev/null

relay_start a --poll-interval-ms 200
mcp_start --mcp-wait-ms 1000
ok "the front door is ready (port $MCP_PORT)" test -n "$MCP_PORT"

PROXY_HEADER="Authorization: Bearer $TOKEN" python3 "$ITEST_ROOT/tests/mcp/cut_proxy.py" --no-cut "$MCP_PORT" 220 \
    >"$T/proxy.log" 2>"$T/proxy.err" &
ITEST_PIDS+=("$!")
PROXY_PORT=""
for i in $(seq 1 100); do
    PROXY_PORT=$(sed -n 's/^listening 127.0.0.1://p' "$T/proxy.log")
    [ -n "$PROXY_PORT" ] && break
    sleep 0.05
done
[ -n "$PROXY_PORT" ] || bail "the token proxy did not start"

# ---- the suite without a token: refused --------------------------------------------------------
(cd "$T" && timeout -k 5 60 "$NODE_BIN" "$SUITE_ALPHA" server --url "http://127.0.0.1:$MCP_PORT/mcp" \
    --scenario server-initialize --spec-version 2025-11-25 -o "$T/direct") >"$T/direct.out" 2>&1
rc=$?
ok "straight at the front door the suite (which cannot send a token) is refused: Unauthorized" \
    bash -c "[ $rc != 0 ] && grep -qiE 'unauthori[sz]ed|401' '$T'/direct/*/checks.json"

# ---- the runs ------------------------------------------------------------------------------------
# conformance LABEL SUITE EXPECTED_FILE SUITE_ARGS...: one run through the
# proxy (at most 150 s), its scenarios as TAP, the suite's own verdict.
conformance() {
    local label=$1 suite=$2 expected=$3 out status desc detail rc
    shift 3
    out="$T/conformance-${label//[^A-Za-z0-9.-]/_}"
    (cd "$T" && timeout -k 5 150 "$NODE_BIN" "$suite" server --url "http://127.0.0.1:$PROXY_PORT/mcp" \
        "$@" --expected-failures "$expected" -o "$out") >"$out.log" 2>&1
    rc=$?
    python3 "$ITEST_ROOT/tests/mcp/conformance_tap.py" "$label" "$out" "$expected" >"$out.tap" 2>"$out.err" ||
        echo "not ok	$label: the results could not be read	$(head -c 300 "$out.err")" >>"$out.tap"
    while IFS=$'\t' read -r status desc detail; do
        case "$status" in
        ok)
            TAP_COUNT=$((TAP_COUNT + 1))
            echo "ok $TAP_COUNT - $desc"
            ;;
        "not ok")
            TAP_COUNT=$((TAP_COUNT + 1))
            echo "not ok $TAP_COUNT - $desc"
            [ -n "$detail" ] && echo "#   $detail"
            TAP_FAILED=$((TAP_FAILED + 1))
            ;;
        summary) echo "# conformance $desc: $detail" ;;
        esac
    done <"$out.tap"
    is "$rc" 0 "$label: the suite's own verdict with $(basename "$expected"): only expected failures"
    [ "$rc" = 0 ] || sed -n '/=== SUMMARY ===/,$p' "$out.log" | tail -n 25 | sed 's/^/#   /'
}
EXP=$ITEST_ROOT/tests/mcp
conformance "0.1.16 2025-11-25" "$SUITE_0116" "$EXP/conformance-expected-2025-11-25.yaml" \
    --suite all --spec-version 2025-11-25
conformance "0.2.0-alpha.12 2025-11-25" "$SUITE_ALPHA" "$EXP/conformance-expected-2025-11-25.yaml" \
    --requirements 2025-11-25
conformance "0.2.0-alpha.12 2026-07-28" "$SUITE_ALPHA" "$EXP/conformance-expected-2026-07-28.yaml" \
    --requirements 2026-07-28

# The deliveries behind it: no key had two effects, whatever the suite sent.
is "$(receiver_stat ok keys_with_duplicate_effects)$(receiver_stat slow keys_with_duplicate_effects)" 00 \
    "no key had two effects at the receivers"

kill -TERM "$MCP_PID"
for i in $(seq 1 100); do kill -0 "$MCP_PID" 2>/dev/null || break; sleep 0.1; done
wait "$MCP_PID"
is "$?" 0 "the front door stops on SIGTERM with exit 0 (sanitizers clean)"
ok "the relay's log has no sanitizer report" relay_logs_clean
itest_done
