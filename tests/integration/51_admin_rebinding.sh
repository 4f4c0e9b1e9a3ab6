#!/usr/bin/env bash
# Issue 24, item 6: the admin port answers any Host, so a web page on a name
# that its owner points at 127.0.0.1 could read saved responses
# (/v1/intents/{key}) and /ui through the victim's browser (DNS rebinding).
# Now: IP addresses, localhost and the names of --admin-hosts are answered;
# any other Host, or a non-loopback Origin, gets 403 on every path.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup
receiver_start r
target_add t "http://127.0.0.1:$RECV_PORT_r/act"
sql "SELECT outbox.enqueue('rb:1', 't', '{\"secret\": \"s3\"}')" >/dev/null
relay_start a --admin-listen 127.0.0.1:0 --admin-hosts "outbox-relay, outbox-relay.payments.svc"
ADMIN=$(relay_admin_port a)
[ -n "$ADMIN" ] || bail "no admin port"
wait_for 20 "SELECT state FROM outbox.intents WHERE key = 'rb:1'" succeeded || bail "not delivered"
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
U=http://127.0.0.1:$ADMIN
for path in /v1/intents/rb:1 /ui /metrics /healthz; do
    is "$(code -H 'Host: attacker.example' "$U$path")" 403 "Host attacker.example: 403 on $path"
done
is "$(code -H 'Host: 127.0.0.1.nip.io' "$U/v1/intents/rb:1")" 403 "a name that looks like an address: 403"
is "$(code -H "Host: localhost:$ADMIN" "$U/v1/intents/rb:1")" 200 "Host localhost: answered"
is "$(code -H "Host: 10.1.2.3:$ADMIN" "$U/healthz")" 200 "an IP address (a pod's, for the kubelet and Prometheus): answered"
is "$(code -H "Host: [::1]:$ADMIN" "$U/healthz")" 200 "[::1]: answered"
is "$(code -H 'Host: outbox-relay:9464' "$U/v1/intents/rb:1")" 200 "a name of --admin-hosts: answered"
is "$(code -H 'Host: OUTBOX-RELAY.payments.svc' "$U/v1/intents/rb:1")" 200 "in any case"
is "$(code -H 'Origin: http://attacker.example' "$U/v1/intents/rb:1")" 403 "an Origin that is not loopback: 403"
is "$(code -H "Origin: http://localhost:$ADMIN" "$U/ui")" 200 "a loopback Origin: answered"
ok "the 403 carries no saved response" bash -c "! curl -s -H 'Host: attacker.example' '$U/v1/intents/rb:1' | grep -q s3"
kill -TERM "$RELAY_PID_a"
relay_wait a 20
is "$?" 0 "the relay stops cleanly"
itest_done
