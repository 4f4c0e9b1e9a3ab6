#!/usr/bin/env bash
# Banned calls under relay/: unsafe string functions everywhere, and blocking
# libpq/libcurl calls everywhere but the short-lived CLI commands (migrate.c).
set -u
cd "$(dirname "$0")/../.."
fail=0
if grep -nE '\b(atoi|sprintf|strcpy|strcat|gets)\s*\(' relay/*.c; then
    echo "banned: atoi/sprintf/strcpy/strcat/gets under relay/" >&2; fail=1
fi
if grep -nE '\b(PQexec|PQexecParams|PQexecPrepared|PQconnectdb|PQreset|PQcancel|curl_easy_perform|sleep|usleep)\s*\(' \
        $(ls relay/*.c | grep -v -e relay/migrate.c -e relay/cli.c); then
    echo "banned: blocking call on the event loop" >&2; fail=1
fi
[ $fail = 0 ] && echo "banned calls: none"
exit $fail
