#!/usr/bin/env bash
# The receiver-side inbox (schema/inbox.sql, docs/design.md principle 4): a receiving service
# with its OWN database records each idempotency key and its answer in the transaction
# of its effect, so duplicates get the stored answer and cause no second effect.
#   - tests/inbox/inbox.sql (pgTAP: begin/finish, COMMIT check, concurrent duplicates)
#   - the example receiver (tests/inbox/inbox_receiver.c, one process per connection,
#     blocking libpq) on a second database: 200 keys sent twice in sequence, then 200
#     new keys sent 4 times each at once (xargs -P): one effect per key, the balances
#     moved once per key, every duplicate answer equal to the first
#   - a key reused with another body: 422, no effect; the status URL /by-key/{key}
#   - the real relay: 500 intents to a receiver that loses every 5th reply after its
#     effect (the relay must deliver those again): 500 succeeded, 500 effects, the saved
#     response of each intent is the receiver's stored answer
. "$(dirname "$0")/../lib/itest.sh"

INBOX_BIN=${INBOX_RECEIVER_BIN:-$ITEST_ROOT/build/inbox-receiver}
if [ -z "${INBOX_RECEIVER_BIN:-}" ]; then
    make --no-print-directory -C "$ITEST_ROOT" build/inbox-receiver >/dev/null || bail "cannot build $INBOX_BIN"
fi

itest_setup

# rsql DB SQL: like sql, in another database of the cluster
rsql() { psql -X -q -tA -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }

# --- the inbox's own SQL tests, in a database of their own ----------------------
sql "CREATE DATABASE inbox_unit" >/dev/null
rsql inbox_unit "CREATE EXTENSION pgtap; CREATE EXTENSION dblink" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -d inbox_unit -f "$ITEST_ROOT/schema/inbox.sql" >/dev/null 2>"$T/inbox-install.err" ||
    bail "schema/inbox.sql does not install: $(cat "$T/inbox-install.err")"
psql -X -q -v ON_ERROR_STOP=1 -d inbox_unit -f "$ITEST_ROOT/schema/inbox.sql" >/dev/null 2>&1
ok "schema/inbox.sql installs, and again over itself" test $? = 0
PGOPTIONS="-c statement_timeout=60s" pg_prove -d inbox_unit "$ITEST_ROOT/tests/inbox/inbox.sql" >"$T/inbox-unit.log" 2>&1
rc=$?
ok "tests/inbox/inbox.sql: $(grep -oE 'Tests=[0-9]+' "$T/inbox-unit.log" | head -1) ($(tail -1 "$T/inbox-unit.log"))" test $rc = 0
[ $rc = 0 ] || sed 's/^/# /' "$T/inbox-unit.log"

# --- the receiver's own database: the inbox and the example's tables -------------
sql "CREATE DATABASE receiver" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -d receiver -f "$ITEST_ROOT/schema/inbox.sql" \
    -f "$ITEST_ROOT/tests/inbox/example_schema.sql" >/dev/null 2>&1 || bail "cannot set up the receiver database"
rsql receiver "INSERT INTO accounts SELECT g, 1000000 FROM generate_series(1, 10) g" >/dev/null
ok "the outbox database knows nothing of the inbox" test "$(sql "SELECT count(*) FROM pg_namespace WHERE nspname = 'inbox'")" = 0

# inbox_start NAME [options]: sets INBOX_PORT_<NAME>
inbox_start() {
    local name=$1; shift
    "$INBOX_BIN" --db "host=$PGHOST port=$PGPORT user=postgres dbname=receiver" "$@" \
        >"$T/inbox-$name.out" 2>"$T/inbox-$name.err" &
    local pid=$! i port=""
    ITEST_PIDS+=("$pid")
    for i in $(seq 1 100); do
        port=$(sed -n 's/^listening 127.0.0.1://p' "$T/inbox-$name.out" 2>/dev/null)
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || bail "inbox receiver $name did not start: $(cat "$T/inbox-$name.err")"
    printf -v "INBOX_PORT_$name" '%s' "$port"
}

# --delay-ms: the transaction stays open 30 ms after the effect, so that duplicates overlap it.
inbox_start main --delay-ms 30 --max-children 64 --log
URL="http://127.0.0.1:$INBOX_PORT_main"
ok "the receiver answers /healthz" curl -sf -m 5 "$URL/healthz" -o /dev/null

# post KEY BODY OUT: POST with the key; the body of the answer in OUT, its status in OUT.code
post() {
    curl -s -m 30 -X POST -H "Idempotency-Key: $1" -H 'Content-Type: application/json' -d "$2" \
        -o "$3" -w '%{http_code}\n' "$URL/pay" >"$3.code"
}
export -f post
export URL

# --- sequential duplicates ---------------------------------------------------------
mkdir -p "$T/seq1" "$T/seq2" "$T/conc"
for i in $(seq 1 200); do
    post "seq:$i" "{\"account\": $((i % 10 + 1)), \"amount\": $i}" "$T/seq1/$i"
done
for i in $(seq 1 200); do
    post "seq:$i" "{\"amount\": $i, \"account\": $((i % 10 + 1))}" "$T/seq2/$i"
done
is "$(cat "$T"/seq1/*.code | sort | uniq -c | tr -s ' ')" " 200 200" "200 keys, first delivery: 200 answers 200"
is "$(cat "$T"/seq2/*.code | sort | uniq -c | tr -s ' ')" " 200 200" "the same 200 keys again: 200 answers 200"
ok "every sequential duplicate's answer equals the first answer (body)" diff -r -q -x '*.code' "$T/seq1" "$T/seq2"
ok "the answers are the effect's (key, account, balance, effect id)" grep -q '"effect": ' "$T/seq1/7"
is "$(rsql receiver "SELECT count(*) || ' ' || count(DISTINCT key) || ' ' || max(n) FROM
                      (SELECT key, count(*) AS n FROM effects WHERE key LIKE 'seq:%' GROUP BY key) e")" \
   "200 200 1" "sequential: 200 keys, one effect each"

# --- concurrent duplicates: 4 at once per key --------------------------------------
for i in $(seq 1 200); do
    for j in 1 2 3 4; do echo "$i $j"; done
done | xargs -P 16 -n 2 bash -c 'post "conc:$0" "{\"account\": $(($0 % 10 + 1)), \"amount\": $0}" "'"$T"'/conc/$0.$1"'
is "$(cat "$T"/conc/*.code | sort | uniq -c | tr -s ' ')" " 800 200" "200 keys x 4 concurrent deliveries: 800 answers 200"
bad=0
for i in $(seq 1 200); do
    for j in 2 3 4; do cmp -s "$T/conc/$i.1" "$T/conc/$i.$j" || bad=$((bad + 1)); done
done
is "$bad" 0 "concurrent duplicates: all 4 answers of each key are the same answer"
is "$(rsql receiver "SELECT count(*) || ' ' || count(DISTINCT key) || ' ' || max(n) FROM
                      (SELECT key, count(*) AS n FROM effects WHERE key LIKE 'conc:%' GROUP BY key) e")" \
   "200 200 1" "concurrent: 200 keys, one effect each"
is "$(grep -c '^delivery conc:[0-9]* duplicate 200 ' "$T/inbox-main.err")" 600 \
   "the receiver answered 600 of the 800 from the inbox (duplicates), 200 with a new effect"
waited=$(grep '^delivery conc:[0-9]* duplicate ' "$T/inbox-main.err" | sed 's/.*begin_ms=//' | awk '$1 >= 10' | wc -l)
echo "# concurrent duplicates whose inbox.begin waited >= 10 ms for the first transaction: $waited of 600"
ok "duplicates really met in the database: some waited for the first transaction's claim ($waited)" test "$waited" -gt 0
is "$(rsql receiver "SELECT count(*) FROM accounts a WHERE balance <> 1000000 -
                      (SELECT coalesce(sum(amount), 0) FROM effects e WHERE e.account = a.id)")" 0 \
   "every balance moved exactly by its effects"
is "$(rsql receiver "SELECT sum(1000000 - balance) FROM accounts")" $((2 * 200 * 201 / 2)) \
   "the balances moved once per key: 2 x (1 + ... + 200)"
is "$(rsql receiver "SELECT count(*) FROM inbox.processed WHERE status = 200")" 400 "400 answers stored in the inbox"

# --- misuse and the status URL -----------------------------------------------------
post "seq:1" '{"account": 2, "amount": 999}' "$T/reuse"
is "$(cat "$T/reuse.code")" 422 "a key reused with another body: 422"
is "$(rsql receiver "SELECT count(*) FROM effects WHERE key = 'seq:1'")" 1 "...and no second effect"
post "" '{"account": 1, "amount": 1}' "$T/nokey"
is "$(cat "$T/nokey.code")" 400 "no key: 400"
is "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$URL/by-key/seq%3A7")" 200 "status URL: a processed key 200"
ok "status URL: the stored answer" cmp -s <(curl -s -m 5 "$URL/by-key/seq%3A7" | sed 's/.*"response": \(.*\)}$/\1/') "$T/seq1/7"
is "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$URL/by-key/never")" 404 "status URL: an unknown key 404"

# --- the real relay, against a receiver that loses every 5th reply ----------------------
inbox_start lossy --drop-every 5 --max-children 64 --log
target_add inbox "http://127.0.0.1:$INBOX_PORT_lossy/pay" \
    status_url="'http://127.0.0.1:$INBOX_PORT_lossy/by-key/{key}'" timeout_ms=5000 \
    backoff_base_ms=20 backoff_cap_ms=200 max_in_flight=32
sql "SELECT count(*) FROM (SELECT outbox.enqueue('relay:' || g, 'inbox',
         jsonb_build_object('account', g % 10 + 1, 'amount', 1)) FROM generate_series(1, 500) g) x" >/dev/null
relay_start r1 --exit-when-idle --poll-interval-ms 100
relay_wait r1 180
is "$?" 0 "the relay delivers all 500 and exits when idle"
is "$(sql "SELECT state || ' ' || count(*) FROM outbox.intents WHERE target = 'inbox' GROUP BY state")" \
   "succeeded 500" "500 intents succeeded"
dropped=$(grep -c '^delivery relay:[0-9]* new-reply-dropped ' "$T/inbox-lossy.err")
dups=$(grep -c '^delivery relay:[0-9]* duplicate ' "$T/inbox-lossy.err")
lost=$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
             WHERE i.target = 'inbox' AND a.class = 'ambiguous'")
echo "# receiver: $dropped replies dropped after the effect, $dups duplicates answered from the inbox;" \
     "relay: $lost ambiguous attempts (a reply lost on a reused connection is re-sent by libcurl itself)"
ok "replies were lost after the effect ($dropped) and every such key came again: $dups duplicates" \
    test "$dropped" -gt 0 -a "$dups" -ge "$dropped"
is "$(rsql receiver "SELECT count(*) || ' ' || count(DISTINCT key) || ' ' || max(n) FROM
                      (SELECT key, count(*) AS n FROM effects WHERE key LIKE 'relay:%' GROUP BY key) e")" \
   "500 500 1" "500 effects at the receiver, one per key"
sql "SELECT key || ' ' || (response_body::jsonb)::text FROM outbox.intents WHERE target = 'inbox' ORDER BY key" >"$T/relay-saved"
rsql receiver "SELECT key || ' ' || response::text FROM inbox.processed WHERE key LIKE 'relay:%' ORDER BY key" >"$T/inbox-stored"
ok "each intent's saved response is the receiver's stored answer" cmp -s "$T/relay-saved" "$T/inbox-stored"
ok "no sanitizer report in the relay log" relay_logs_clean

itest_done
