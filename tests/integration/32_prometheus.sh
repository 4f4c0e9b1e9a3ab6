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
#     one that refuses them (400);
#   - every dashboard query and every alert expression, evaluated through
#     GET /api/v1/query, succeeds; every dashboard query returns a finite value
#     (throughput and latency one above 0); every relay metric selector in any
#     of them matches series; the target variable lists both targets; every
#     rule is healthy in Prometheus, and OutboxTargetFailureRatio is pending for
#     the refusing target only;
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
relay_start one --admin-listen "127.0.0.1:0" --poll-interval-ms 200
ADMIN_PORT=$(relay_admin_port one)
[ -n "$ADMIN_PORT" ] || bail "the relay did not log its admin port"

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
    --positive "Outcomes/s by target and resulting state" --positive "Delivery latency" ||
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
is "$(cut -f1 "$T/ratio.txt")" 'namespace="outbox-itest",target="refunds"' \
    "OutboxTargetFailureRatio's expression selects the refusing target only"
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
itest_done
