#!/usr/bin/env bash
# Kept-alive connections never outnumber --max-in-flight, however many
# targets the deliveries went to (issue 26: the memory bound over TLS).
#
# Over TLS a connection keeps its state while idle (libcurl 7.88 makes an
# SSL_CTX per connection: about 20 KiB with the SSL object, more with a
# session), and the memory bound (docs/operations.md) counts one connection per delivery in
# flight. libcurl's own cache held up to 1,024 idle connections: a relay at
# --max-in-flight 20 that served six HTTPS targets one after another kept 20
# connections to each, 120, and with hundreds of targets up to 1,024 of them,
# outside the bound. The relay now caps the cache at --max-in-flight
# (CURLMOPT_MAXCONNECTS): libcurl closes the connection idle the longest when
# a transfer ends above it.
#
#   six targets, six ports of one nginx (TLS 1.3, a throwaway CA in the
#   targets' ca_file) in front of one receiver that holds each answer 300 ms;
#   20 intents to each target in turn, all 20 in flight at once (20
#   connections to that port), the next target once they succeeded. Then:
#   connections established at nginx <= 20; each intent delivered once.
. "$(dirname "$0")/../lib/itest.sh"
. "$(dirname "$0")/../lib/tls_nginx.sh"
itest_setup

IN_FLIGHT=20
TARGETS=6

tls_make_ca "$T/tls"
receiver_start back --delay-ms 300
tls_nginx_proxy front "$RECV_PORT_back" "$T/tls" "$TARGETS"
first_port=$NGINX_PORT_front
last_port=$((first_port + TARGETS - 1))
for ((i = 0; i < TARGETS; i++)); do
    target_add "t$i" "https://127.0.0.1:$((first_port + i))/act" ca_file="'$T/tls/ca.pem'"
done

# established TCP connections whose local end is one of nginx's ports
nginx_conns() {
    ss -Htn state established "( sport >= :$first_port and sport <= :$last_port )" | grep -c .
}

relay_start kept --log-level warn --max-in-flight "$IN_FLIGHT" --max-in-flight-per-target "$IN_FLIGHT" \
    --poll-interval-ms 100
ok "relay up" wait_for 10 "SELECT count(*) FROM outbox.relays WHERE relay_id = 'relay-kept'" 1

most=0
for ((i = 0; i < TARGETS; i++)); do
    enqueue_many "t$i" "t$i:" "$IN_FLIGHT"
    ok "t$i: its $IN_FLIGHT intents succeeded" wait_for 30 \
        "SELECT count(*) FROM outbox.intents WHERE target = 't$i' AND state = 'succeeded'" "$IN_FLIGHT"
    sleep 0.5 # connections libcurl closed are gone at nginx too
    n=$(nginx_conns)
    [ "$n" -gt "$most" ] && most=$n
done
is "$(receiver_stat back deliveries_total)" $((TARGETS * IN_FLIGHT)) \
    "the receiver saw each of the $((TARGETS * IN_FLIGHT)) deliveries once"
is "$(sql "SELECT count(*) FROM outbox.attempts")" $((TARGETS * IN_FLIGHT)) "one attempt per intent"
peak=$(awk '/^VmHWM:/ {print $2}' "/proc/$RELAY_PID_kept/status")
echo "# connections open at nginx after each target: at most $most; relay peak RSS ${peak:-?} kB"
# After the first target 20 connections are open (one per delivery in
# flight); without the cap each later target would add 20 more.
ok "at most $IN_FLIGHT connections open at nginx after any target (saw $most)" test "$most" -le "$IN_FLIGHT"
ok "the connections were kept alive: more than one open after the last target (saw $(nginx_conns))" \
    test "$(nginx_conns)" -gt 1

kill -TERM "$RELAY_PID_kept" 2>/dev/null
relay_wait kept 20
is "$?" 0 "the relay exits 0 on SIGTERM"
itest_done
