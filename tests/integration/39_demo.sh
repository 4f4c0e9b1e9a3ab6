#!/usr/bin/env bash
# `make demo`'s script (tests/demo.sh), with 200 intents: it delivers them with
# no second effect for any key, and leaves nothing behind: its PostgreSQL is
# stopped and its directory removed. (Until this test, its clean-up stopped a
# cluster in the wrong directory and then removed the right one, leaving the
# server running on a deleted data directory after every `make demo`.)
. "$(dirname "$0")/../lib/itest.sh"

out=$(mktemp /tmp/outbox-itest-demo.XXXXXX)
DEMO_INTENTS=200 "$ITEST_ROOT/tests/demo.sh" >"$out" 2>&1
is "$?" 0 "the demo exits 0"
dir=$(sed -n 's/.*a throwaway PostgreSQL in \(\/tmp\/outbox-demo\.[A-Za-z0-9]*\).*/\1/p' "$out" | head -1)
ok "the demo says where its PostgreSQL is" test -n "$dir"
is "$(grep -c '0 keys with a duplicate effect' "$out")" 2 "both receivers: no key with a duplicate effect"
ok "no key needs a person" grep -q 'keys that need a person (outbox.stuck): 0' "$out"
ok "the demo migrated as a non-superuser owner" grep -q 'migrating as outbox_owner (CREATEROLE, not a superuser' "$out"
ok "its steps run again debit once per intent (200 intents, 25 cents each)" \
    grep -q 'still 200 intents; debited 5000 cents = 25 per intent, once each' "$out"
ok "the demo's directory is removed" test ! -e "$dir"
# The server, if one was left, is the demo's (our child's) and is stopped here by its PID.
left=$(ps -eo pid=,args= | grep -F -- "-D $dir/pg/data" | grep -v grep | awk '{print $1}')
is "$left" "" "no PostgreSQL is left running on it"
for pid in $left; do kill -INT "$pid" 2>/dev/null; done
if [ "$TAP_FAILED" = 0 ]; then rm -f "$out"; else echo "# demo output kept in $out" >&2; fi
itest_done
