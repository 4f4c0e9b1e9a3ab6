#!/usr/bin/env bash
# The Grafana dashboard (deploy/grafana/outbox-relay.json) and the alerts
# (every PrometheusRule under deploy/kubernetes) against a real Prometheus
# scraping a real relay that delivers:
#   - the alerting rules, extracted from the manifests, pass `promtool check
#     rules` and the unit tests in tests/prom/ (`promtool test rules`), which
#     have a firing and a quiet case for every alert, and fail when any alert's
#     expression is made to never fire;
#   - Prometheus (Debian `prometheus`) on a free 127.0.0.1 port, listening on
#     nothing else, scrapes the relay's admin port every second and evaluates
#     the same rules; the relay delivers 3000 intents to a receiver and 150 to
#     one that refuses them (400); it serves its database as one line of
#     --databases ("main"), so that its series carry database="main" and the
#     dashboard's database variable and row have something to show;
#   - every dashboard query and every alert expression, evaluated through
#     GET /api/v1/query, succeeds; every dashboard query returns a finite value
#     (throughput and latency one above 0); every relay metric selector in any
#     of them matches series; the target variable lists both targets, the
#     database variable "main"; every
#     rule is healthy in Prometheus, and OutboxTargetFailureRatio is pending for
#     the refusing target only;
#   - an MCP front door (`outbox-relay mcp`), started with the Host allow-list the
#     example overlay gives it (expanded as the kubelet does), answers its Service's
#     names in the namespace and refuses another namespace's; Prometheus scrapes it
#     as the job outbox-relay-mcp while agents call a tool whose target succeeds, one
#     whose target refuses (failed), one whose target is down (not final when the
#     wait ends), and a client with a wrong token is refused; the front door's alerts
#     are pending for those tools and that reason only, and its dashboard row has data;
#   - the checks fail on a dashboard or a rule file with a wrong metric name, a
#     wrong label value, a syntax error or an unknown Grafana variable.
# Skips only when prometheus or promtool is not installed.
. "$(dirname "$0")/../lib/itest.sh"

PROMETHEUS=$(command -v prometheus || true)
PROMTOOL=$(command -v promtool || true)
if [ -z "$PROMETHEUS" ] || [ -z "$PROMTOOL" ]; then
    echo "ok 1 - dashboard and alerts against a real Prometheus # SKIP prometheus/promtool not installed (Debian package prometheus)"
    echo "1..1"
    exit 0
fi
PY=""
for candidate in /usr/bin/python3 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import yaml' 2>/dev/null; then
        PY=$candidate
        break
    fi
done
[ -n "$PY" ] || bail "python3 with PyYAML (Debian: python3-yaml) is needed"

itest_setup

DASHBOARD=$ITEST_ROOT/deploy/grafana/outbox-relay.json
KUBE=$ITEST_ROOT/deploy/kubernetes
PROMCHECK=("$PY" "$ITEST_ROOT/tests/prom/promcheck.py")
RULES=$T/prom/outbox-relay.rules.yml # the name the tests/prom/*.test.yml load
mkdir -p "$T/prom"

# tap_from FILE: promcheck's "ok<TAB>desc" / "not ok<TAB>desc<TAB>detail" lines as TAP.
tap_from() {
    local status desc detail
    while IFS=$'\t' read -r status desc detail; do
        TAP_COUNT=$((TAP_COUNT + 1))
        if [ "$status" = ok ]; then
            echo "ok $TAP_COUNT - $desc"
        else
            echo "not ok $TAP_COUNT - $desc"
            [ -n "$detail" ] && echo "#   $detail"
            TAP_FAILED=$((TAP_FAILED + 1))
        fi
    done <"$1"
}

# quietly LOG CMD...: run CMD with its output in LOG, shown as TAP comments if it fails.
quietly() {
    local log=$1; shift
    "$@" >"$log" 2>&1 && return 0
    sed -e 's/^/#   /' "$log" | head -n 40
    return 1
}

# promcheck OUT ARGS...: run the helper into OUT; a crash is a failure of its own.
promcheck() {
    local out=$1; shift
    "${PROMCHECK[@]}" "$@" >"$out" 2>"$out.err"
    local rc=$?
    [ "$rc" = 0 ] || { cat "$out.err" >&2; echo "promcheck $1 exited $rc"; }
    return "$rc"
}

# ---------------------------------------------------------------- rules, offline
ok "alerting rules extracted from deploy/kubernetes" promcheck "$T/alerts.txt" rules "$KUBE" "$RULES"
mapfile -t ALERTS <"$T/alerts.txt"
echo "# alerts: ${ALERTS[*]}"
ok "promtool check rules" quietly "$T/check-rules.log" "$PROMTOOL" check rules "$RULES"
cp "$ITEST_ROOT"/tests/prom/*.test.yml "$T/prom/"
ok "promtool test rules tests/prom/*.test.yml" \
    quietly "$T/promtool-test.log" "$PROMTOOL" test rules "$T"/prom/*.test.yml
promcheck "$T/coverage.txt" coverage "$RULES" "$ITEST_ROOT/tests/prom" || ok "coverage check ran" false
tap_from "$T/coverage.txt"

# Each alert's own tests must notice when its expression can never fire.
for alert in "${ALERTS[@]}"; do
    dir=$T/neutered-$alert
    mkdir -p "$dir"
    cp "$T"/prom/*.test.yml "$dir/"
    "${PROMCHECK[@]}" neuter "$RULES" "$alert" "$dir/outbox-relay.rules.yml"
    "$PROMTOOL" test rules "$dir"/*.test.yml >"$dir/promtool.log" 2>&1
    rc=$?
    ok "promtool tests fail when $alert never fires" \
        eval '[ "$rc" != 0 ] && grep -q "alertname: $alert," "$dir/promtool.log"'
done

ok "dashboard lint ran" promcheck "$T/lint.txt" lint "$DASHBOARD"
tap_from "$T/lint.txt"

# ---------------------------------------------------------------- a relay delivering
receiver_start api --dedupe
receiver_start refuse --mode-status 400
target_add api "http://127.0.0.1:$RECV_PORT_api/calls"
target_add refunds "http://127.0.0.1:$RECV_PORT_refuse/refunds"
# The MCP front door's targets and tools, known to the relay from its start.
# Targets of their own, so that the relay's counts below stay the relay's scenario's.
target_add down "http://127.0.0.1:9/refunds" backoff_base_ms=200
target_add mcp_api "http://127.0.0.1:$RECV_PORT_api/mcp-calls"
target_add mcp_refunds "http://127.0.0.1:$RECV_PORT_refuse/mcp-refunds"
sql "INSERT INTO outbox.mcp_tools (tool, target, description) VALUES
       ('call_api', 'mcp_api', 'A target that answers 200.'),
       ('refund_refused', 'mcp_refunds', 'A target that answers 400.'),
       ('refund_down', 'down', 'A target that is down.')" >/dev/null
echo "main $RELAY_DB_URL" >"$T/relay.databases"
relay_start one --databases "$T/relay.databases" --admin-listen "127.0.0.1:0" --poll-interval-ms 200
ADMIN_PORT=$(relay_admin_port one)
[ -n "$ADMIN_PORT" ] || bail "the relay did not log its admin port"

# ---------------------------------------------------------------- an MCP front door
# Its Host allow-list as the example overlay sets it, expanded as the kubelet does
# (namespace payments, cluster.local).
MCP_HOSTS=""
if command -v kubectl >/dev/null 2>&1 &&
    kubectl kustomize "$KUBE/overlays/example" >"$T/overlay.yaml" 2>/dev/null; then
    MCP_HOSTS=$("$PY" "$ITEST_ROOT/tests/lib/kubelet_env.py" "$T/overlay.yaml" outbox-relay-mcp OUTBOX_RELAY_MCP_HOSTS)
fi
echo "# OUTBOX_RELAY_MCP_HOSTS of the example overlay: ${MCP_HOSTS:-(kubectl missing)}"
# A target that is down (nothing listens on port 9 of 127.0.0.1): its calls end their
# wait pending.
MCP_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('agent', '$MCP_TOKEN')" >/dev/null
mcp_start --mcp-wait-ms 3000 ${MCP_HOSTS:+--mcp-hosts "$MCP_HOSTS"}

# mcp_post HOST TOKEN BODY: POST /mcp with that Host header; prints the HTTP status.
mcp_post() {
    curl -s -o "$T/mcp-last.json" -w '%{http_code}' -m 20 -H "Host: $1" -H "Authorization: Bearer $2" \
        -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        -H 'MCP-Protocol-Version: 2025-11-25' -d "$3" "http://127.0.0.1:$MCP_PORT/mcp"
}
# mcp_tool TOOL KEY [TOKEN]: a tools/call; prints the HTTP status and the status told.
mcp_tool() {
    local code
    code=$(mcp_post "127.0.0.1:$MCP_PORT" "${3:-$MCP_TOKEN}" \
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"$1\",\"arguments\":{\"n\":1},\"_meta\":{\"outbox-relay/idempotency-key\":\"$2\"}}}")
    echo "$code $(sed -n 's/.*"status":"\([a-z_]*\)".*/\1/p' "$T/mcp-last.json" | head -1)"
}
TOOLS_LIST='{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
if [ -n "$MCP_HOSTS" ]; then
    IFS=, read -ra names <<<"$MCP_HOSTS"
    for name in "${names[@]}"; do
        is "$(mcp_post "$name:9465" "$MCP_TOKEN" "$TOOLS_LIST")" 200 "the front door answers Host: $name:9465"
    done
    is "${#names[@]}" 4 "the overlay's allow-list has the Service's four names"
    ok "...among them outbox-relay-mcp.payments.svc.cluster.local" \
        grep -qx 'outbox-relay-mcp.payments.svc.cluster.local' < <(tr ',' '\n' <<<"$MCP_HOSTS")
else
    ok "the example overlay's Host allow-list # SKIP kubectl not installed" true
fi
is "$(mcp_post "outbox-relay-mcp.other.svc:9465" "$MCP_TOKEN" "$TOOLS_LIST")" 403 \
    "...and refuses another namespace's name (403)"

# The labels a Prometheus Operator scrape adds (namespace, pod): the alerts
# aggregate by namespace and name the pod.
cat >"$T/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $RULES
scrape_configs:
  - job_name: outbox-relay
    metrics_path: /metrics
    static_configs:
      - targets: ["127.0.0.1:$ADMIN_PORT"]
        labels:
          namespace: outbox-itest
          pod: relay-one
  - job_name: outbox-relay-mcp
    metrics_path: /metrics
    static_configs:
      - targets: ["127.0.0.1:$MCP_PORT"]
        labels:
          namespace: outbox-itest
          pod: mcp-one
EOF
ok "promtool check config" quietly "$T/check-config.log" "$PROMTOOL" check config "$T/prometheus.yml"

# prom_start: Prometheus on a free 127.0.0.1 port → PROM_PID, PROM_URL.
prom_start() {
    local try port i
    for try in 1 2 3 4 5 6 7 8; do
        port=$((20000 + (RANDOM * 7 + $$ + try * 137) % 40000))
        pgcluster_port_free "$port" || continue
        rm -rf "$T/prom-data"
        "$PROMETHEUS" --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/prom-data" \
            --web.listen-address="127.0.0.1:$port" >"$T/prometheus.log" 2>&1 &
        PROM_PID=$!
        ITEST_PIDS+=("$PROM_PID")
        PROM_URL=http://127.0.0.1:$port
        for i in $(seq 1 150); do
            [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$PROM_URL/-/ready")" = 200 ] && return 0
            kill -0 "$PROM_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$PROM_PID" 2>/dev/null
        grep -q "address already in use" "$T/prometheus.log" || break
    done
    sed -e 's/^/# prometheus: /' "$T/prometheus.log" | tail -n 20
    return 1
}
prom_start || bail "Prometheus did not start"
echo "# prometheus $("$PROMETHEUS" --version 2>&1 | head -1 | cut -d' ' -f3) at $PROM_URL, pid $PROM_PID"

# listens_on_loopback_only PID: every listening TCP socket of PID is 127.0.0.1's.
listens_on_loopback_only() {
    local addrs
    addrs=$(ss -Hltnp | grep "pid=$1," | awk '{print $4}')
    echo "# listening: $(tr '\n' ' ' <<<"$addrs")"
    [ -n "$addrs" ] && ! grep -qv '^127\.0\.0\.1:' <<<"$addrs"
}
ok "Prometheus listens on 127.0.0.1 only" listens_on_loopback_only "$PROM_PID"

# prom_value EXPR → the single value of an instant query (empty if none).
prom_value() {
    "${PROMCHECK[@]}" query "$PROM_URL" "$1" 2>/dev/null | awk -F'\t' 'NR == 1 {print $2}'
}
# prom_wait SECONDS EXPR WANT: poll until EXPR's value is WANT.
prom_wait() {
    local limit=$1 expr=$2 want=$3 i
    for i in $(seq 1 $((limit * 5))); do
        [ "$(prom_value "$expr")" = "$want" ] && return 0
        sleep 0.2
    done
    echo "#   $expr = '$(prom_value "$expr")', want '$want'"
    return 1
}
ok 'Prometheus scrapes the relay: up{job="outbox-relay"} 1' prom_wait 20 'up{job="outbox-relay"}' 1.0
ok 'Prometheus scrapes the front door: up{job="outbox-relay-mcp"} 1' prom_wait 20 'up{job="outbox-relay-mcp"}' 1.0

# Agents' calls, after the first scrape and over several: a counter's first sample
# is its base, so each tool is called once, scraped, then called again.
is "$(mcp_tool call_api k-api-0)" "200 succeeded" "a call to call_api: succeeded"
is "$(mcp_tool refund_refused k-ref-0)" "200 failed" "a call to refund_refused: failed"
ok "a call to refund_down: not final when the wait ends (pending or delivering)" \
    eval '[[ "$(mcp_tool refund_down k-down-0)" =~ ^200\ (pending|delivering)$ ]]'
ok "Prometheus has scraped the first calls" \
    prom_wait 20 'sum(outbox_mcp_calls_total{job="outbox-relay-mcp"})' 3.0
for i in 1 2 3 4; do
    mcp_tool call_api "k-api-$i" >/dev/null
    mcp_tool refund_refused "k-ref-$i" >/dev/null
done
down_pids=()
for i in 1 2 3; do
    mcp_tool refund_down "k-down-$i" >"$T/down-$i.txt" &
    down_pids+=("$!")
done
wait "${down_pids[@]}"
for i in $(seq 1 15); do mcp_tool call_api "k-bad-$i" not-a-token >/dev/null; done
sleep 2
ok "Prometheus has scraped the failed calls" \
    prom_wait 20 'sum(outbox_mcp_calls_total{status="failed"})' 5.0
ok "Prometheus has scraped the 15 refusals of a wrong token" \
    prom_wait 20 'sum(outbox_mcp_refusals_total{reason="auth"})' 15.0

# Deliveries spread over a few scrapes, while Prometheus watches.
for round in 1 2 3; do
    enqueue_many api "a$round-" 1000
    enqueue_many refunds "r$round-" 50
    sleep 1
done
ok "3000 intents delivered" wait_for 60 "SELECT count(*) FROM outbox.intents WHERE target = 'api' AND state = 'succeeded'" 3000
ok "150 intents refused (failed)" wait_for 60 "SELECT count(*) FROM outbox.intents WHERE target = 'refunds' AND state = 'failed'" 150
ok "Prometheus has scraped the 3000 deliveries" \
    prom_wait 20 'sum(outbox_deliveries_total{target="api",state="succeeded"})' 3000.0
ok "Prometheus has scraped the 150 refusals" \
    prom_wait 20 'sum(outbox_attempts_total{target="refunds",class="permanent_failure"})' 150.0

# ---------------------------------------------------------------- every expression
promcheck "$T/eval.txt" eval "$PROM_URL" "$DASHBOARD" "$RULES" \
    --positive "Succeeded/s" --positive "Attempts/s by class" \
    --positive "Outcomes/s by target and resulting state" --positive "Delivery latency" \
    --positive "MCP calls/s by tool and status" --positive "MCP refusals/s by reason" \
    --positive "MCP call latency" --positive "Succeeded/s by database" ||
    ok "evaluation ran" false
tap_from "$T/eval.txt"
QUERIES=$("$PY" -c 'import json, sys
panels = json.load(open(sys.argv[1]))["panels"]
panels += [q for p in panels for q in p.get("panels") or []]
print(sum(1 for p in panels for t in p.get("targets") or [] if "expr" in t))' "$DASHBOARD")
is "$(grep -cP "^(ok|not ok)\tdashboard '.*' [A-Z]+: " "$T/eval.txt")" "$QUERIES" \
    "each of the dashboard's $QUERIES queries was evaluated"
is "$(grep -cP "^(ok|not ok)\talert " "$T/eval.txt")" "${#ALERTS[@]}" \
    "each of the ${#ALERTS[@]} alert expressions was evaluated"

promcheck "$T/health.txt" rules-health "$PROM_URL" "$RULES" || ok "rules health ran" false
tap_from "$T/health.txt"

# The failure ratio alert against real counters: the refusing target only.
ratio_expr=$("$PY" -c 'import sys, yaml
for g in yaml.safe_load(open(sys.argv[1]))["groups"]:
    for r in g["rules"]:
        if r.get("alert") == "OutboxTargetFailureRatio": print(r["expr"])' "$RULES")
"${PROMCHECK[@]}" query "$PROM_URL" "$ratio_expr" >"$T/ratio.txt" 2>&1
echo "# OutboxTargetFailureRatio: $(tr '\t\n' '= ' <"$T/ratio.txt")"
# (grouped by database too: the relay serves its database as "main" of --databases)
is "$(cut -f1 "$T/ratio.txt")" "$(printf '%s\n' 'database="main",namespace="outbox-itest",target="mcp_refunds"' \
    'database="main",namespace="outbox-itest",target="refunds"')" \
    "OutboxTargetFailureRatio's expression selects the refusing targets only (refunds, and the front door's mcp_refunds)"
alert_pending() {
    local i
    for i in $(seq 1 50); do
        "${PROMCHECK[@]}" alerts "$PROM_URL" >"$T/alerts-active.txt" 2>&1
        grep -qP '^OutboxTargetFailureRatio\tpending\t.*target="refunds"' "$T/alerts-active.txt" &&
            ! grep -q 'target="api"' "$T/alerts-active.txt" && return 0
        sleep 0.2
    done
    sed -e 's/^/#   /' "$T/alerts-active.txt"
    return 1
}
ok "Prometheus holds OutboxTargetFailureRatio pending for refunds (for: 10m), nothing for api" alert_pending

# The front door's alerts against its real counters: pending (for: 10m) for the
# refusing tool, the tool whose target is down, and the wrong token only.
mcp_alerts_pending() {
    local i
    for i in $(seq 1 50); do
        "${PROMCHECK[@]}" alerts "$PROM_URL" >"$T/alerts-active.txt" 2>&1
        if grep -qP '^OutboxMcpCallsFailing\tpending\t.*tool="refund_refused"' "$T/alerts-active.txt" &&
            grep -qP '^OutboxMcpCallsNotFinal\tpending\t.*tool="refund_down"' "$T/alerts-active.txt" &&
            grep -qP '^OutboxMcpRefusals\tpending\t.*reason="auth"' "$T/alerts-active.txt"; then
            break
        fi
        sleep 0.2
    done
    sed -e 's/^/#   /' "$T/alerts-active.txt"
    [ "$(grep -cP '^OutboxMcpCallsFailing\t' "$T/alerts-active.txt")" = 1 ] &&
        grep -qP '^OutboxMcpCallsFailing\tpending\t.*tool="refund_refused"' "$T/alerts-active.txt" &&
        [ "$(grep -cP '^OutboxMcpCallsNotFinal\t' "$T/alerts-active.txt")" = 1 ] &&
        grep -qP '^OutboxMcpCallsNotFinal\tpending\t.*tool="refund_down"' "$T/alerts-active.txt" &&
        [ "$(grep -cP '^OutboxMcpRefusals\t' "$T/alerts-active.txt")" = 1 ] &&
        grep -qP '^OutboxMcpRefusals\tpending\t.*reason="auth"' "$T/alerts-active.txt" &&
        ! grep -qP '^OutboxMcpNotReady\t' "$T/alerts-active.txt"
}
ok "Prometheus holds OutboxMcpCallsFailing (refund_refused), OutboxMcpCallsNotFinal (refund_down) and OutboxMcpRefusals (auth) pending, nothing else of the front door's" \
    mcp_alerts_pending

# ---------------------------------------------------------------- the checks can fail
# A dashboard with four faults: a wrong metric name, a wrong label value, a
# syntax error (in the lag's query, which two panels use), an unknown variable.
# Exactly those five queries must fail.
sed -e 's/outbox_retries_total/outbox_retries_totl/' \
    -e 's/max(outbox_intents{state=\\"unknown\\"})/max(outbox_intents{state=\\"unknwon\\"})/' \
    -e 's/"max(outbox_oldest_pending_age_seconds)"/"max(outbox_oldest_pending_age_seconds"/' \
    -e 's/sum(outbox_in_flight{target=~\\"$target\\"})/sum(outbox_in_flight{target=~\\"$target\\",pod=~\\"$pod\\"})/' \
    "$DASHBOARD" >"$T/broken-dashboard.json"
echo "groups: []" >"$T/no.rules.yml"
"${PROMCHECK[@]}" eval "$PROM_URL" "$T/broken-dashboard.json" "$T/no.rules.yml" >"$T/broken.txt" 2>&1
echo "# failed as they should: $(grep -c '^not ok' "$T/broken.txt")"
grep '^not ok' "$T/broken.txt" | cut -f2 | sed -e 's/^/#   /'
ok "a misspelt metric name fails" grep -qP '^not ok\tdashboard .Retries/s by target. A: .*outbox_retries_totl' "$T/broken.txt"
ok "a wrong label value fails (no series)" grep -qP '^not ok\tdashboard .Unknown \(reconciling\). A: .*unknwon' "$T/broken.txt"
ok "a syntax error fails" grep -qP '^not ok\tdashboard .Oldest due pending. A: .*\tbad_data' "$T/broken.txt"
ok "an unknown Grafana variable fails" grep -qP '^not ok\tdashboard .In flight. A: .*\tunknown Grafana variables' "$T/broken.txt"
ok "nothing else fails in the broken dashboard" \
    eval '[ "$(grep -c "^not ok" "$T/broken.txt")" = 5 ]'
# A rule file with a misspelt metric in one alert.
sed -e 's/outbox_oldest_pending_age_seconds/outbox_oldest_pending_age_secs/' "$RULES" >"$T/broken.rules.yml"
"${PROMCHECK[@]}" eval "$PROM_URL" "$DASHBOARD" "$T/broken.rules.yml" >"$T/broken-rules.txt" 2>&1
ok "an alert with a misspelt metric fails" \
    grep -qP '^not ok\talert OutboxPendingLag: .*selector matches nothing: outbox_oldest_pending_age_secs' "$T/broken-rules.txt"

ok "relay log has no sanitizer report" relay_logs_clean
ok "front door log has no sanitizer report" eval '! grep -q "Sanitizer" "$T/mcp.log"'
itest_done
