#!/usr/bin/env bash
# tests/demo.sh — `make demo`: the relay's main job on an embedded default.
#
# A throwaway PostgreSQL, two local receivers that inject faults into 5 % of
# requests (one deduplicates by key; one cannot, but answers a status URL),
# 3,000 intents
# enqueued in business transactions that debit an account, the relay draining
# them with progress, and a summary. Everything started is stopped at the end.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. tests/lib/pgcluster.sh
N=${DEMO_INTENTS:-3000}
D=$(mktemp -d /tmp/outbox-demo.XXXXXX)
( cd "$D" && touch a.out b.out relay.log ) # read while their writers start: empty, not missing
chmod 755 "$D"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    pgcluster_stop "$D/pg"
    rm -rf "$D"
}
trap cleanup EXIT

say() { printf '\033[1m%s\033[0m\n' "$*"; }
q() { psql -X -q -tA -v ON_ERROR_STOP=1 -c "$1"; }

say "1. a throwaway PostgreSQL in $D"
pgcluster_start "$D/pg"
echo "   migrating as outbox_owner (CREATEROLE, not a superuser: what a managed PostgreSQL gives)"
build/outbox-relay migrate --db "$OWNER_URL" --migrations-dir migrations | sed 's/^/   /'

say "2. two local receivers"
build/test-receiver --dedupe --random-faults 0.05 --seed 7 --late-ms 1500 >"$D/a.out" 2>&1 &
PIDS+=($!)
build/test-receiver --random-faults 0.05 --seed 8 --late-ms 1500 >"$D/b.out" 2>&1 &
PIDS+=($!)
sleep 0.3
PA=$(sed -n 's/^listening 127.0.0.1://p' "$D/a.out")
PB=$(sed -n 's/^listening 127.0.0.1://p' "$D/b.out")
q "INSERT INTO outbox.targets (name, url, status_url, timeout_ms, backoff_base_ms, backoff_cap_ms)
   VALUES ('payments.refund', 'http://127.0.0.1:$PA/refunds', 'http://127.0.0.1:$PA/status/{key}', 1000, 50, 500)"
q "INSERT INTO outbox.targets (name, url, key_header, status_url, timeout_ms, reconcile_delay_ms)
   VALUES ('crm.note', 'http://127.0.0.1:$PB/notes', NULL, 'http://127.0.0.1:$PB/status/{key}', 1000, 2000)"
echo "   payments.refund → 127.0.0.1:$PA (deduplicates by key; 5 % of requests get a fault)"
echo "   crm.note        → 127.0.0.1:$PB (cannot deduplicate; has a status URL; 5 % faults)"

say "3. $N business transactions, each debiting an account and enqueueing an intent"
q "CREATE TABLE public.accounts (id int PRIMARY KEY, balance_cents bigint NOT NULL)"
q "INSERT INTO public.accounts SELECT g, 1000000 FROM generate_series(1, 100) g"
# The safe form of a step (README): the business write happens only when
# this call inserted the intent, so a step run again after a crash debits
# nothing twice.
q "CREATE FUNCTION public.refund_step(run int, step int) RETURNS void LANGUAGE plpgsql AS \$\$
   BEGIN
     IF (outbox.enqueue(format('run-%s:step-%s', run, step),
                        CASE WHEN step % 4 = 0 THEN 'crm.note' ELSE 'payments.refund' END,
                        jsonb_build_object('account', run % 100 + 1, 'amount_cents', 25,
                                           'ref', format('run-%s:step-%s', run, step)))).inserted THEN
       UPDATE public.accounts SET balance_cents = balance_cents - 25 WHERE id = run % 100 + 1;
     END IF;
   END
   \$\$"
for ((i = 1; i <= N; i += 100)); do
    psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<SQL
$(for ((j = i; j < i + 100 && j <= N; j++)); do echo "BEGIN; SELECT public.refund_step($((j / 4)), $((j % 4))); COMMIT;"; done)
SQL
done
echo "   enqueued: $(q "SELECT count(*) FROM outbox.intents")"
# A run that crashed after its commits and resumed calls its steps again.
psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<SQL
$(for ((j = 1; j <= 100 && j <= N; j++)); do echo "BEGIN; SELECT public.refund_step($((j / 4)), $((j % 4))); COMMIT;"; done)
SQL
echo "   the first 100 steps run again (a resumed run): still $(q "SELECT count(*) FROM outbox.intents") intents;"\
     "debited $(q "SELECT 100 * 1000000 - sum(balance_cents) FROM public.accounts") cents = 25 per intent, once each"

say "4. the relay drains them"
build/outbox-relay run --relay-id demo --admin-listen "" --exit-when-idle --poll-interval-ms 100 \
    --log-level warn 2>"$D/relay.log" &
RELAY=$!
PIDS+=($RELAY)
while kill -0 $RELAY 2>/dev/null; do
    echo "   $(q "SELECT string_agg(state || ' ' || n, ', ' ORDER BY state) FROM
                 (SELECT state, count(*) n FROM outbox.intents GROUP BY state) s")"
    sleep 0.5
done
wait $RELAY || true

say "5. summary"
effects_a=$(curl -s "127.0.0.1:$PA/_stats")
effects_b=$(curl -s "127.0.0.1:$PB/_stats")
num() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
psql -X -q -v ON_ERROR_STOP=1 <<SQL
SELECT target,
       count(*) AS enqueued,
       count(*) FILTER (WHERE state = 'succeeded') AS delivered,
       sum(attempts) AS attempts,
       count(*) FILTER (WHERE ambiguous) AS ambiguous,
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM outbox.attempts a WHERE a.intent_id = i.id
                          AND a.class IN ('reconciled_executed', 'reconciled_not_executed'))) AS reconciled,
       count(*) FILTER (WHERE state = 'unknown') AS "unknown (reconciling)",
       count(*) FILTER (WHERE state = 'failed') AS failed
  FROM outbox.intents i GROUP BY target ORDER BY target;
SQL
echo "   effects at payments.refund receiver: $(num effects_total <<<"$effects_a") effects,"\
     "$(num deduplicated_total <<<"$effects_a") duplicates absorbed by its key,"\
     "$(num faults_total <<<"$effects_a") faults injected,"\
     "$(num keys_with_duplicate_effects <<<"$effects_a") keys with a duplicate effect"
echo "   effects at crm.note receiver:        $(num effects_total <<<"$effects_b") effects over"\
     "$(num deliveries_total <<<"$effects_b") deliveries,"\
     "$(num faults_total <<<"$effects_b") faults injected,"\
     "$(num keys_with_duplicate_effects <<<"$effects_b") keys with a duplicate effect"
echo "   keys that need a person (outbox.stuck): $(q "SELECT count(*) FROM outbox.stuck")"
