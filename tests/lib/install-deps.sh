#!/usr/bin/env bash
# tests/lib/install-deps.sh — install what building, testing and the demo need on Debian 12.
#
#   tests/lib/install-deps.sh [--build] [--print]
#   --build   only what compiling needs (make's build-deps: compiler, pkg-config, -dev packages)
#   --print   never install: print the apt-get line and fail (what make does)
#
# As root, missing Debian packages are installed with apt-get; otherwise the
# exact apt-get command is printed and the script fails. Quiet when all is there.
set -euo pipefail

build_only=0
print_only=0
for arg in "$@"; do
    case "$arg" in
    --build) build_only=1 ;;
    --print) print_only=1 ;;
    *) echo "usage: $0 [--build] [--print]" >&2; exit 2 ;;
    esac
done

build_packages=(
    build-essential pkg-config
    libpq-dev libcurl4-openssl-dev libuv1-dev libjansson-dev libssl-dev libhttp-parser-dev
    libgmp-dev # exact decimal numbers of the MCP front door's JSON Schema check (relay/mcp/json_schema.c)
    check
)
packages=(
    "${build_packages[@]}"
    postgresql postgresql-contrib postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl
    curl ca-certificates procps iproute2 clang-format cppcheck python3 python3-yaml openssl valgrind
    clang libclang-rt-14-dev # libFuzzer for tests/fuzz (-fsanitize=fuzzer; only recommended by clang)
    spin # the model checker of tests/model (it compiles its verifiers with gcc)
    prometheus # prometheus and promtool for tests/integration/32_prometheus.sh (dashboard and alerts)
    chromium # the headless browser of tests/integration/35_status_page.sh (the admin port's /ui)
    # The receiver of make bench's headline (tests/bench/headline.sh), which starts its own on a
    # free loopback port; the package's service (port 80) is neither needed nor touched. Where
    # policy-rc.d forbids starting services (containers, this image) none starts at install.
    nginx
    wrk # the 64 HTTP clients of make bench's mcp scenario (tests/bench/mcp.sh)
    json-schema-test-suite # the official JSON Schema tests, against relay/mcp/json_schema.c (tests/mcp/schema_suite.sh)
    locales # en_US.UTF-8 for tests/integration/66_upgrade_collation.sh (a database that sorts as words; localedef)
)
# The deploy manifest check renders the kustomize base with kubectl; any
# kubectl will do (Debian's kubernetes-client ships one; another package may
# already own /usr/bin/kubectl).
command -v kubectl >/dev/null 2>&1 || packages+=(kubernetes-client)
[ "$build_only" = 1 ] && packages=("${build_packages[@]}")

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || [ "$print_only" = 1 ]; then
    echo "outbox-relay needs these Debian packages: ${missing[*]}" >&2
    echo "install them with:  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null || apt-get update
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
