#!/usr/bin/env bash
# Banned calls under relay/, by folder (HACKING.md, "The floors"):
#   everywhere       unsafe string functions (atoi, sprintf, strcpy, strcat, gets)
#   all but cli/     blocking libpq/libcurl calls and sleeps: everything outside
#                    relay/cli/ runs on an event loop (the CLI commands are
#                    short-lived and may block)
#   lib/             no outbox knowledge: no header from the daemon, admin/,
#                    cli/ or the front door, and no outbox.* SQL
set -u
cd "$(dirname "$0")/../.."
fail=0
all=$(find relay -name '*.c' | sort)
loop=$(find relay -name '*.c' -not -path 'relay/cli/*' | sort)
if grep -nE '\b(atoi|sprintf|strcpy|strcat|gets)\s*\(' $all; then
    echo "banned: atoi/sprintf/strcpy/strcat/gets under relay/" >&2; fail=1
fi
if grep -nE '\b(PQexec|PQexecParams|PQexecPrepared|PQconnectdb|PQreset|PQcancel|curl_easy_perform|sleep|usleep)\s*\(' \
        $loop; then
    echo "banned: blocking call on the event loop (allowed only under relay/cli/)" >&2; fail=1
fi
if grep -nE '#include "' relay/lib/*.[ch] | grep -vE '#include "lib/[a-z0-9_]+\.h"'; then
    echo "banned: relay/lib/ includes a header from outside relay/lib/" >&2; fail=1
fi
if grep -nE '\boutbox\.[a-z_]+' relay/lib/*.[ch]; then
    echo "banned: relay/lib/ knows the outbox schema" >&2; fail=1
fi
[ $fail = 0 ] && echo "banned calls: none"
exit $fail
