#!/usr/bin/env bash
# One relay over two databases (--databases), "alpha" and "beta", with rows
# in several states in each, different in number:
#  - /ui lists both databases, each with the counts the relay last read of it
#    (pending, unknown), equal to the rows of its table; /ui?database=NAME is
#    that database's page: its targets with their counts equal to its rows,
#    and its stuck keys, only its own, linked to /ui/intents/KEY?database=NAME;
#    a key's page is read in the database it names (404 in the other), the
#    search stays in the page's database, and a page without ?database= or
#    with an unknown NAME says so (404);
#  - retention runs in each database: the succeeded intents of each are
#    pruned to tombstones, and outbox_pruned_total{database="NAME"} counts
#    each database's own, equal to its tombstones.
. "$(dirname "$0")/../lib/itest.sh"
. "$(dirname "$0")/../lib/multidb.sh"
itest_setup

for name in alpha beta; do multidb_add "$name"; done
multidb_migrate
# The page reads as outbox_operator (docs/operations.md); roles are the cluster's.
sql "GRANT outbox_operator TO itest_relay" >/dev/null

receiver_start ok
receiver_start broken --mode-status 500
# per database: "hook" delivers and is pruned a second after; "legacy" has
# no key header, so its 500 leaves the outcome unknown (stuck); "off" is
# disabled once its rows are in (enqueue refuses a disabled target): they wait pending.
declare -A DELIVERED=([alpha]=6 [beta]=4) STUCK=([alpha]=2 [beta]=3) WAITING=([alpha]=7 [beta]=5)
for name in alpha beta; do
    dsql "$name" "INSERT INTO outbox.targets (name, url, retain_for, dedupe_window)
                  VALUES ('hook', 'http://127.0.0.1:$RECV_PORT_ok/act', '1 second', '1 hour');
                  INSERT INTO outbox.targets (name, url, key_header)
                  VALUES ('legacy', 'http://127.0.0.1:$RECV_PORT_broken/legacy', NULL);
                  INSERT INTO outbox.targets (name, url)
                  VALUES ('off', 'http://127.0.0.1:$RECV_PORT_ok/off')" >/dev/null
    dsql "$name" "SELECT count(*) FROM (
                    SELECT outbox.enqueue('$name-done:' || g, 'hook', '{}') FROM generate_series(1, ${DELIVERED[$name]}) g
                    UNION ALL SELECT outbox.enqueue('$name-stuck:' || g, 'legacy', '{}') FROM generate_series(1, ${STUCK[$name]}) g
                    UNION ALL SELECT outbox.enqueue('$name-wait:' || g, 'off', '{}') FROM generate_series(1, ${WAITING[$name]}) g) x" >/dev/null ||
        bail "enqueue in $name"
    dsql "$name" "UPDATE outbox.targets SET enabled = false WHERE name = 'off'" >/dev/null
done

relay_start one --databases "$T/relay.databases" --admin-listen "127.0.0.1:0" --poll-interval-ms 200 \
    --prune-interval-ms 1000
ADMIN="http://127.0.0.1:$(relay_admin_port one)"
count() { dsql "$1" "SELECT count(*) FROM outbox.intents WHERE $2"; }
settled() { [ "$(count "$1" "state IN ('unknown') AND target = 'legacy'")" = "${STUCK[$1]}" ] &&
    [ "$(dsql "$1" "SELECT count(*) FROM outbox.tombstones")" = "${DELIVERED[$1]}" ]; }
for name in alpha beta; do
    ok "$name: its legacy keys are unknown, its delivered ones pruned to tombstones" wait_cmd 60 settled "$name"
done

# cells FILE SECTION: the rows of a section's table, one line each, cells
# separated by "|" (text only, tags dropped); then "LINK <href>" for each link.
cells() {
    python3 - "$1" "$2" <<'PY'
import html.parser, sys
class P(html.parser.HTMLParser):
    def __init__(self, want):
        super().__init__(); self.want = want; self.depth = 0; self.rows = []; self.row = None
        self.cell = None; self.links = []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            if self.depth or a.get("id") == self.want: self.depth += 1
        if not self.depth: return
        if tag == "tr": self.row = []
        elif tag == "td" and self.row is not None: self.cell = ""
        elif tag == "a" and "href" in a: self.links.append(a["href"])
    def handle_endtag(self, tag):
        if not self.depth: return
        if tag == "section": self.depth -= 1
        elif tag == "td" and self.cell is not None: self.row.append(self.cell.strip()); self.cell = None
        elif tag == "tr" and self.row: self.rows.append(self.row); self.row = None
    def handle_data(self, d):
        if self.depth and self.cell is not None: self.cell += d
p = P(sys.argv[2]); p.feed(open(sys.argv[1]).read())
for r in p.rows: print("|".join(r))
for l in p.links: print("LINK " + l)
PY
}
page() { curl -s --max-time 10 -o "$T/$2.html" -w '%{http_code}' "$ADMIN$1"; }

# /ui: the databases, each with the counts of its last refresh (every 5 s).
index_shows() {
    [ "$(page /ui index)" = 200 ] || return 1
    local name
    for name in alpha beta; do
        # columns: database|state|pending|in flight|unknown|awaiting approval
        grep -qx "$name|ready|$(count "$name" "state = 'pending'")|0|$(count "$name" "state = 'unknown'")|0" \
            <(cells "$T/index.html" databases) || return 1
    done
}
ok "/ui lists each database with its pending and unknown rows" wait_cmd 30 index_shows
ok "/ui links each database to its page" grep -qx 'LINK /ui?database=beta' <(cells "$T/index.html" databases)
is "$(count alpha "state = 'pending'") $(count beta "state = 'pending'")" "7 5" "the rows counted: 7 and 5 pending"

for name in alpha beta; do
    other=$([ "$name" = alpha ] && echo beta || echo alpha)
    is "$(page "/ui?database=$name" "$name")" 200 "/ui?database=$name answers"
    ok "its title names the database" grep -q "<h1>Database $name</h1>" "$T/$name.html"
    cells "$T/$name.html" targets >"$T/$name.targets"
    # columns: target|circuit|pending|in flight|unknown|awaiting approval|succeeded 5 min|...
    is "$(awk -F'|' '$1 == "off" {print $3}' "$T/$name.targets")" "$(count "$name" "target = 'off' AND state = 'pending'")" \
        "$name: off's pending count is its rows (${WAITING[$name]})"
    is "$(awk -F'|' '$1 == "legacy" {print $5}' "$T/$name.targets")" "$(count "$name" "target = 'legacy' AND state = 'unknown'")" \
        "$name: legacy's unknown count is its rows (${STUCK[$name]})"
    ok "$name: the stuck keys' heading counts its own" grep -q "<h2>Stuck keys (${STUCK[$name]})</h2>" "$T/$name.html"
    cells "$T/$name.html" stuck >"$T/$name.stuck"
    is "$(grep -c "^$name-stuck:[0-9]*|legacy|unknown|" "$T/$name.stuck")" "${STUCK[$name]}" "$name: each of its stuck keys listed"
    is "$(grep -c "$other-" "$T/$name.stuck")" 0 "$name: none of $other's"
    is "$(grep -c "^LINK /ui/intents/$name-stuck%3A[0-9]*?database=$name$" "$T/$name.stuck")" "${STUCK[$name]}" \
        "$name: each links to its page in $name"
    ok "$name: the search stays in $name" grep -q "<input type=\"hidden\" name=\"database\" value=\"$name\">" "$T/$name.html"
done

is "$(page "/ui/intents/alpha-stuck%3A1?database=alpha" key)" 200 "a key's page in its database"
ok "the page is the key's" grep -q "<h1>Key alpha-stuck:1</h1>" "$T/key.html"
is "$(page "/ui/intents/alpha-stuck%3A1?database=beta" key-other)" 404 "the same key in the other database: 404"
is "$(page "/ui/intents/alpha-stuck%3A1" key-none)" 404 "a key's page without ?database=: 404"
ok "which says to name the database" grep -q "add ?database=NAME" "$T/key-none.html"
is "$(page "/ui?database=gamma" gamma)" 404 "an unknown database: 404"
is "$(page "/ui?database=Bad!" bad)" 400 "a malformed NAME: 400"
location=$(curl -s --max-time 10 -o /dev/null -w '%{redirect_url}' "$ADMIN/ui/intents?key=beta-stuck%3A2&database=beta")
is "${location#"$ADMIN"}" "/ui/intents/beta-stuck%3A2?database=beta" "the search redirects within the database"

# Retention ran in each database, and each counts its own.
metrics=$(curl -s --max-time 10 "$ADMIN/metrics")
for name in alpha beta; do
    is "$(awk -v s="outbox_pruned_total{database=\"$name\"}" '$1 == s {print $2}' <<<"$metrics")" \
        "$(dsql "$name" "SELECT count(*) FROM outbox.tombstones")" \
        "outbox_pruned_total{database=\"$name\"}: its tombstones (${DELIVERED[$name]})"
    is "$(count "$name" "target = 'hook'")" 0 "$name: its delivered intents are gone"
    ok "$name: its prune runs are counted" test "$(awk -v s="outbox_prune_runs_total{database=\"$name\",result=\"done\"}" \
        '$1 == s {print $2}' <<<"$metrics")" -ge 1
    ok "$name: its last prune's time is set" test "$(awk -v s="outbox_prune_last_success_timestamp_seconds{database=\"$name\"}" \
        '$1 == s {print int($2)}' <<<"$metrics")" -gt 0
done
is "$(grep -c '^outbox_pruned_total ' <<<"$metrics")" 0 "no unlabelled sample"
is "$(grep -c '^# TYPE outbox_pruned_total ' <<<"$metrics")" 1 "one family"
ok "prune_run lines name their database" grep -q '"event":"prune_run","database":"beta","pruned":[1-9]' "$T/relay-one.log"

kill -TERM "$RELAY_PID_one"; relay_wait one 30
is "$?" 0 "exit 0"
ok "no sanitizer report" relay_logs_clean
itest_done
