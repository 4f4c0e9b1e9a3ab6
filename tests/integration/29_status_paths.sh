#!/usr/bin/env bash
# A status check asks about exactly the intent's key: keys holding '/', '%',
# '.', '..', '?', '#' and spaces reach the receiver's /status/{key} intact
# (percent-encoded, dot segments not resolved: CURLOPT_PATH_AS_IS). Each
# delivery is acted on and its answer dropped (ambiguous) by a legacy target
# that cannot deduplicate, so only its status URL can tell: a mangled path
# would ask about another key, read its 404 as "not executed", and send the
# intent a second time.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start legacy
target_add legacy "http://127.0.0.1:$RECV_PORT_legacy/act" key_header=NULL reconcile_delay_ms=300 \
    "status_url='http://127.0.0.1:$RECV_PORT_legacy/status/{key}'"
keys=("a/b" "50%" "100%25" "x.y" "a/../b" "../up" "dots..." "q?x=1&y=2" "h#frag" "sp ace" "tab-less:~_*'()!" "ünï/cødé")
for k in "${keys[@]}"; do
    lit=${k//\'/\'\'}
    sql "SELECT outbox.enqueue('$lit', 'legacy', jsonb_build_object('ref', '$lit', '_fault', 'drop_after'))" >/dev/null \
        || echo "# enqueue refused: $k"
done
# "." and ".." are refused by enqueue (OR009); written by the table owner here,
# they show that libcurl does not resolve them (CURLOPT_PATH_AS_IS).
for k in "." ".."; do
    sql "INSERT INTO outbox.intents (key, target, payload, fingerprint)
         VALUES ('$k', 'legacy', jsonb_build_object('ref', '$k', '_fault', 'drop_after'), '\\x00')" >/dev/null
    keys+=("$k")
done
n=${#keys[@]}
relay_start one --poll-interval-ms 200
ok "every intent ends succeeded (the status URL found its key)" wait_for 30 \
    "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" "$n"
is "$(sql "SELECT count(*) FROM outbox.attempts WHERE class = 'reconciled_executed'")" "$n" \
    "each through one status check that said executed"
is "$(receiver_stat legacy keys_with_duplicate_effects)" 0 "no key acted on twice"
is "$(receiver_stat legacy keys)" "$n" "each key acted on once"
sql "SELECT i.key, a.class FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
      WHERE a.class <> 'ambiguous' ORDER BY a.id" | sed 's/^/# /'
kill -TERM "$RELAY_PID_one"; relay_wait one 20
is "$?" 0 "relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
