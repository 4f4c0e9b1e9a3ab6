#!/usr/bin/env python3
"""tests/bench/report.py RAW.jsonl OUT.json — the bench's arithmetic and table.

run.sh writes one JSON line per measurement (raw.jsonl); this turns them into
figures (medians over rounds; ratios taken within one round, then their
median), prints the table with each target and PASS/MISS, and writes the same
figures, the raw measurements, versions and settings to OUT.json.
Standard library only.
"""
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def median(xs):
    return statistics.median(xs) if xs else None


def percentile(sorted_xs, p):
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_xs:
        return None
    k = max(0, min(len(sorted_xs) - 1, int(round(p / 100.0 * len(sorted_xs) + 0.5)) - 1))
    return sorted_xs[k]


def trickle_latencies(rec):
    commits = {}
    with open(rec["commits"]) as f:
        for line in f:
            key, at, took = line.rstrip("\n").split("\t")
            commits[key] = (int(at), int(took))
    arrivals = {}
    duplicates = 0
    with open(rec["arrivals"]) as f:
        for line in f:
            key, at = line.rstrip("\n").split("\t")
            if key in arrivals:
                duplicates += 1
                continue
            arrivals[key] = int(at)
    lat = sorted((arrivals[k] - c[0]) / 1000.0 for k, c in commits.items() if k in arrivals)
    took = sorted(c[1] / 1000.0 for c in commits.values())
    return {
        "samples": len(lat),
        "missing": len(commits) - len(lat),
        "duplicate_arrivals": duplicates,
        "p50_ms": percentile(lat, 50),
        "p90_ms": percentile(lat, 90),
        "p99_ms": percentile(lat, 99),
        "max_ms": lat[-1] if lat else None,
        "negative": sum(1 for x in lat if x < 0),
        "enqueue_commit_p50_ms": percentile(took, 50),
        "enqueue_commit_p99_ms": percentile(took, 99),
    }


def held_figures(rec):
    """The held-snapshot scenario (tests/bench/held.sh): commit → arrival and
    commit → settled (the record's now(), a wall clock taken back to
    CLOCK_MONOTONIC by the offset measured at the end) per phase, one
    phase per minute: before the hold, each minute of it, after it."""
    rate = rec["rate_per_s"]
    per_min = 60 * rate
    commits = {}
    with open(rec["commits"]) as f:
        for line in f:
            key, at, _ = line.rstrip("\n").split("\t")
            commits[key] = int(at)
    arrivals = {}
    with open(rec["arrivals"]) as f:
        for line in f:
            key, at = line.rstrip("\n").split("\t")
            arrivals.setdefault(key, int(at))
    settled = {}
    with open(rec["settled"]) as f:
        for line in f:
            key, at = line.rstrip("\n").split("\t")
            settled[key] = int(at) - rec["realtime_minus_monotonic_us"]
    lo, hi = rec["hold_from_n"], rec["hold_to_n"]
    phases = {}
    for key, c in commits.items():
        n = int(key.rsplit(":", 1)[1])
        if n < lo:
            name = "before"
        elif n < hi:
            name = "hold min {}".format((n - lo) // per_min + 1)
        else:
            name = "after min {}".format((n - hi) // per_min + 1)
        p = phases.setdefault(name, {"arrival": [], "settled": [], "n": n})
        if key in arrivals:
            p["arrival"].append((arrivals[key] - c) / 1000.0)
        if key in settled:
            p["settled"].append((settled[key] - c) / 1000.0)
    out = []
    for name, p in sorted(phases.items(), key=lambda kv: kv[1]["n"]):
        a, s = sorted(p["arrival"]), sorted(p["settled"])
        out.append({"phase": name, "samples": len(a), "arrival_p50_ms": percentile(a, 50),
                    "arrival_p99_ms": percentile(a, 99), "settled_p50_ms": percentile(s, 50),
                    "settled_p99_ms": percentile(s, 99)})
    samples = []
    with open(rec["samples"]) as f:
        for line in f:
            x = line.split()
            samples.append({"s": int(x[0]), "phase": x[1], "pg_cpu_s": float(x[2]), "total_bytes": int(x[3]),
                            "heap_bytes": int(x[4]), "dead": int(x[5]), "live": int(x[6]), "autovacuums": int(x[7]),
                            "inserts": int(x[8]), "heap_blks": int(x[9]), "due_blks": int(x[10]),
                            "in_flight_blks": int(x[11]),
                            # 0050's columns (absent from older samples)
                            "relays_blks": int(x[12]) if len(x) > 14 else 0,
                            "in_flight_tups": int(x[13]) if len(x) > 14 else 0,
                            "relays_updates": int(x[14]) if len(x) > 14 else 0})
    return {"phases": out, "samples": samples, "missing": len(commits) - sum(o["samples"] for o in out)}


def held_per_intent(samples, field, scale=1.0):
    """A counter's growth per intent inserted (field × scale) before, during, after the hold."""
    out = []
    for first, last in (("before", "hold_start"), ("hold_start", "hold_end"), ("hold_end", "end")):
        a = next((x for x in samples if x["phase"] == first), None)
        b = [x for x in samples if x["phase"] == last]
        if a and b and b[-1]["inserts"] > a["inserts"]:
            out.append((b[-1][field] - a[field]) * scale / (b[-1]["inserts"] - a["inserts"]))
    return out


def main():
    raw = load(sys.argv[1])
    out_path = sys.argv[2]
    meta = next((r for r in raw if r["kind"] == "meta"), {})
    end = next((r for r in raw if r["kind"] == "end"), {})
    figures = []
    only = [x for x in (meta.get("only") or "").split(",") if x]

    def wanted(name):
        return not only or name in only

    def figure(scenario, name, value, unit, target=None, op=None, runs=None, note="", fmt="{:,.0f}",
               shown=None, target_shown=None, extra=None):
        result = "n/a"
        if value is None:
            result = "BROKEN"
        elif op == ">=":
            result = "PASS" if value >= target else "MISS"
        elif op == "<=":
            result = "PASS" if value <= target else "MISS"
        elif op is None:
            result = "info"
        figures.append({
            "scenario": scenario, "figure": name, "value": value, "unit": unit,
            "target": target, "target_op": op, "result": result,
            "runs": runs or [], "note": note, "_fmt": fmt,
            "_shown": shown, "_target_shown": target_shown, **(extra or {}),
        })

    # ---------------------------------------------------------------- headline
    # Issue 17: the relay as users run it (tests/bench/headline.sh): stock
    # postgresql.conf, Debian's nginx answering 200 {"ok":true}, the relay
    # with default options; libcurl alone (tests/bench/curl_probe.c) against
    # the same nginx in the same round. Printed first, with the targets.
    heads = [r for r in raw if r["kind"] == "headline"]
    tls_heads = [r for r in raw if r["kind"] == "headline_tls"]
    storms = [r for r in raw if r["kind"] == "headline_storm"]
    tls_b = [r for r in raw if r["kind"] == "headline_tls_b"]  # BENCH_RELAY_B, alternating with tls_heads
    log_info = [r for r in raw if r["kind"] == "headline_log_info"]
    log_warn = [r for r in raw if r["kind"] == "headline_log_warn"]
    hmeta = next((r for r in raw if r["kind"] == "headline_meta"), {})
    for r in heads + tls_heads + storms + log_info + log_warn + tls_b:
        n = r["intents"]
        r["rate"] = n / r["wall_s"] if r["wall_s"] > 0 else 0.0
        r["relay_cpu_us"] = (r["relay_user_s"] + r["relay_sys_s"]) * 1e6 / n
        r["pg_cpu_us"] = r["pg_cpu_s"] * 1e6 / n
        r["nginx_cpu_us"] = r["nginx_cpu_s"] * 1e6 / n
        r["mean_in_flight"] = r.get("attempts_latency_s", 0) / r["wall_s"] if r["wall_s"] > 0 else 0.0
        if r.get("wal_bytes") is not None:
            r["wal_per_intent"] = r["wal_bytes"] / n
        # handshakes: connections nginx accepted during the drain, per 1,000 deliveries
        r["handshakes_per_1000"] = r.get("nginx_accepts", 0) * 1000.0 / n
        # `probe`: libcurl alone at the relay's mean in flight; `probecap`: at 1,024
        for p in ("probe", "probecap"):
            req = r.get(p + "_requests")
            if req:
                r[p + "_cpu_us"] = (r[p + "_user_s"] + r[p + "_sys_s"]) * 1e6 / req
                r[p + "_rate"] = req / r[p + "_wall_s"] if r[p + "_wall_s"] > 0 else 0.0
                r[p + "_nginx_cpu_us"] = r[p + "_nginx_cpu_s"] * 1e6 / req
                r[p + "_ratio"] = r["relay_cpu_us"] / r[p + "_cpu_us"] if r[p + "_cpu_us"] > 0 else None
                r[p + "_handshakes_per_1000"] = r.get(p + "_nginx_accepts", 0) * 1000.0 / req
    if heads or wanted("headline"):
        hn = heads[0]["intents"] if heads else 100000
        hs = "headline: {:,} intents".format(int(hn))

        def hm(k):
            return median([r[k] for r in heads if r.get(k) is not None])

        figure(hs, "drain intents/s (start to exit)", hm("rate"), "/s", 25000, ">=",
               [round(r["rate"]) for r in heads],
               "stock postgresql.conf (fsync, synchronous_commit on), a database in {}, {} ({}), relay {}, target "
               "with name and url only; nginx saw {} requests; 1-min load average before/after each round: {}".format(
                   meta.get("defaults_db_locale") or "C.UTF-8", hmeta.get("nginx", "nginx"), hmeta.get("nginx_conf", ""),
                   (hmeta.get("relay_options") or "").strip(),
                   ", ".join("{:,}".format(r["nginx_requests"]) for r in heads),
                   ", ".join("{}/{}".format(r.get("load1_before", "?"), r.get("load1_after", "?")) for r in heads)))
        figure(hs, "PostgreSQL CPU per intent", hm("pg_cpu_us"), "µs", 30, "<=",
               [round(r["pg_cpu_us"], 1) for r in heads],
               "postmaster + every backend and auxiliary process (autovacuum, checkpointer, WAL writer), "
               "/proc ticks before and after the drain", fmt="{:.1f}")
        # Issue 40's step on the way to 30: the same figure, in the database's
        # locale (en_US.UTF-8 unless BENCH_DEF_LOCALE says otherwise).
        figure(hs, "PostgreSQL per delivery ({}), issue 40's step".format(
                   meta.get("defaults_db_locale") or "C.UTF-8"), hm("pg_cpu_us"), "µs", 50, "<=",
               [round(r["pg_cpu_us"], 1) for r in heads],
               "the row above against issue 40's step (50 µs, then 30); what one delivery writes, which "
               "the load does not move: WAL per delivered intent and B-tree entries per delivered intent below",
               fmt="{:.1f}")
        ratio_m = hm("probe_ratio")
        figure(hs, "relay CPU / libcurl alone", ratio_m, "x", 1.1, "<=",
               [round(r["probe_ratio"], 2) for r in heads if r.get("probe_ratio") is not None],
               "relay user+sys per intent (wait4) / curl_probe user+sys per request (getrusage), taken in the "
               "same round against the same nginx, the probe sending as many requests at once as the relay "
               "had in flight on average ({}); relay µs: {}; libcurl µs: {}".format(
                   ", ".join(str(r.get("probe_in_flight", "?")) for r in heads),
                   ", ".join(str(round(r["relay_cpu_us"], 1)) for r in heads),
                   ", ".join(str(round(r.get("probe_cpu_us", 0), 1)) for r in heads)),
               fmt="{:.2f}",
               shown=None if ratio_m is None else "{:.2f} × (relay {:.1f} µs, libcurl {:.1f} µs)".format(
                   ratio_m, hm("relay_cpu_us"), hm("probe_cpu_us")),
               target_shown="≤ 1.10 × libcurl")
        figure(hs, "relay peak RSS", hm("relay_maxrss_kb") / 1024.0 if heads else None, "MiB", 24, "<=",
               [round(r["relay_maxrss_kb"] / 1024.0, 1) for r in heads],
               "wait4 ru_maxrss of the relay (= VmHWM at exit), default --max-in-flight 1024",
               fmt="{:.1f}")
        pgb_h = {}
        for r in raw:
            if r["kind"] == "pgbench":
                pgb_h.setdefault(r["round"], {})[r["variant"]] = r["tps"]
        enq = [v["plain"] / v["enqueue"] for v in pgb_h.values()
               if "plain" in v and "enqueue" in v and v["enqueue"] > 0]
        if enq:
            figure(hs, "enqueue vs plain INSERT", median(enq), "x", 1.3, "<=", [round(x, 3) for x in enq],
                   "from the `enqueue` scenario of this run (tuned cluster, pgbench 8 clients): "
                   "tx/s plain / enqueue", fmt="{:.2f}", target_shown="≤ 1.30 × INSERT")
        if heads:
            figure(hs, "CPU per intent, each process", hm("relay_cpu_us") + hm("pg_cpu_us") + hm("nginx_cpu_us"),
                   "µs", runs=[round(r["relay_cpu_us"] + r["pg_cpu_us"] + r["nginx_cpu_us"], 1) for r in heads],
                   note="medians: relay {:.1f} µs (user {:.1f}, sys {:.1f}), PostgreSQL {:.1f} µs, nginx master + "
                        "workers {:.1f} µs; relay µs per round: {}; nginx µs per round: {}".format(
                       hm("relay_cpu_us"), median([r["relay_user_s"] * 1e6 / r["intents"] for r in heads]),
                       median([r["relay_sys_s"] * 1e6 / r["intents"] for r in heads]),
                       hm("pg_cpu_us"), hm("nginx_cpu_us"),
                       ", ".join(str(round(r["relay_cpu_us"], 1)) for r in heads),
                       ", ".join(str(round(r["nginx_cpu_us"], 1)) for r in heads)), fmt="{:.1f}",
                   shown="relay {:.1f} + PG {:.1f} + nginx {:.1f} µs".format(
                       hm("relay_cpu_us"), hm("pg_cpu_us"), hm("nginx_cpu_us")))
            # Issue 26: the limit per delivery, what any relay must spend, taken
            # in the same round: libcurl alone at the relay's mean in flight +
            # nginx answering it (during that probe) + a bare SKIP LOCKED
            # claim-and-complete (tests/bench/bare_claim.sh); the relay's
            # all-in CPU (relay + PostgreSQL + nginx during the drain) / it.
            lim = [r for r in heads if r.get("probe_cpu_us") is not None and r.get("bare_pg_cpu_s") is not None]
            for r in lim:
                r["bare_pg_cpu_us"] = r["bare_pg_cpu_s"] * 1e6 / r["bare_rows"]
                r["limit_us"] = r["probe_cpu_us"] + r["probe_nginx_cpu_us"] + r["bare_pg_cpu_us"]
                r["all_in_us"] = r["relay_cpu_us"] + r["pg_cpu_us"] + r["nginx_cpu_us"]
                r["limit_ratio"] = r["all_in_us"] / r["limit_us"] if r["limit_us"] > 0 else None
            if lim:
                lm = lambda k: median([r[k] for r in lim if r.get(k) is not None])
                figure(hs, "all-in CPU / the limit", lm("limit_ratio"), "x", 1.2, "<=",
                       [round(r["limit_ratio"], 2) for r in lim if r["limit_ratio"]],
                       "relay + PostgreSQL + nginx CPU per intent during the drain / the limit of the same round: "
                       "libcurl alone (curl_probe at the relay's mean in flight) + nginx during that probe + "
                       "PostgreSQL for a bare SKIP LOCKED claim-and-complete ({:,} rows, batches of {}, two "
                       "commits per batch, tests/bench/bare_claim.sh); all-in µs per round: {}; limit µs per "
                       "round: {}".format(int(lim[0]["bare_rows"]), lim[0].get("bare_batch", 256),
                                          ", ".join(str(round(r["all_in_us"], 1)) for r in lim),
                                          ", ".join(str(round(r["limit_us"], 1)) for r in lim)),
                       fmt="{:.2f}",
                       shown="{:.2f} × ({:.1f} µs / {:.1f} µs)".format(
                           lm("limit_ratio"), lm("all_in_us"), lm("limit_us")),
                       target_shown="≤ 1.20 × the limit")
                figure(hs, "the limit per delivery", lm("limit_us"), "µs",
                       runs=[round(r["limit_us"], 1) for r in lim],
                       note="medians: libcurl alone {:.1f} µs + nginx {:.1f} µs + bare claim-and-complete "
                            "{:.1f} µs of PostgreSQL CPU ({:,.0f} rows/s in one session); against the relay's "
                            "relay {:.1f} + PostgreSQL {:.1f} + nginx {:.1f} µs".format(
                           lm("probe_cpu_us"), lm("probe_nginx_cpu_us"), lm("bare_pg_cpu_us"),
                           median([r["bare_rows"] / r["bare_wall_s"] for r in lim if r["bare_wall_s"] > 0]),
                           lm("relay_cpu_us"), lm("pg_cpu_us"), lm("nginx_cpu_us")),
                       fmt="{:.1f}",
                       shown="libcurl {:.1f} + nginx {:.1f} + PG {:.1f} µs".format(
                           lm("probe_cpu_us"), lm("probe_nginx_cpu_us"), lm("bare_pg_cpu_us")))
            walr = [r for r in heads if r.get("wal_per_intent") is not None]
            if walr:
                figure(hs, "WAL per delivered intent", median([r["wal_per_intent"] for r in walr]), "B",
                       runs=[round(r["wal_per_intent"]) for r in walr],
                       note="pg_current_wal_lsn() before and after the drain / intents: claim, record, history "
                            "and the full-page images after the CHECKPOINT that precedes the drain; it does not "
                            "vary with the machine's load as CPU time does (docs/design.md, \"Cost per delivery\")",
                       fmt="{:.0f}", shown="{:,.0f} bytes".format(median([r["wal_per_intent"] for r in walr])))
            # What the WAL is made of (pg_walinspect, tests/bench/headline.sh
            # wal_composition): the writes per delivery of docs/performance.md,
            # counted in every run rather than once by hand.
            walc = [r for r in heads if r.get("wal_btree_entries") is not None]
            if walc:
                per = lambda r, k: r.get(k, 0) / r["intents"]
                wm = lambda k: median([per(r, k) for r in walc])
                figure(hs, "B-tree entries per delivered intent", wm("wal_btree_entries"), "",
                       runs=[round(per(r, "wal_btree_entries"), 2) for r in walc],
                       note="pg_walinspect over the drain's WAL (the whole cluster's): leaf tuples added "
                            "(INSERT_LEAF, INSERT_POST, SPLIT_L/R) / intents; per intent also: heap inserts {:.2f}, "
                            "updates {:.2f} of which HOT {:.2f}, row locks {:.2f}, WAL records {:.1f}, full-page "
                            "images {:,.0f} bytes (medians)".format(
                           wm("wal_heap_inserts"), wm("wal_heap_updates") + wm("wal_hot_updates"),
                           wm("wal_hot_updates"), wm("wal_heap_locks"), wm("wal_records"), wm("wal_fpi_bytes")),
                       fmt="{:.2f}",
                       shown="{:.2f} ({:.2f} heap versions, {:.0%} HOT)".format(
                           wm("wal_btree_entries"),
                           wm("wal_heap_inserts") + wm("wal_heap_updates") + wm("wal_hot_updates"),
                           (wm("wal_hot_updates") / (wm("wal_heap_updates") + wm("wal_hot_updates")))
                           if wm("wal_heap_updates") + wm("wal_hot_updates") > 0 else 0.0))
            figure(hs, "relay: deliveries in flight (mean)", hm("mean_in_flight"), "",
                   runs=[round(r["mean_in_flight"]) for r in heads],
                   note="its attempts' latencies added up / drain time; connections it opened (nginx accepts): {}; "
                        "its log lines (info): {}; the load's enqueue took {} s".format(
                       ", ".join(str(r.get("nginx_accepts", "?")) for r in heads),
                       ", ".join(str(r.get("relay_log_lines", "?")) for r in heads),
                       ", ".join(str(round(r.get("load_s", 0), 1)) for r in heads)),
                   fmt="{:.0f}")
            for p, label in (("probe", "at the relay's mean in flight"),
                             ("probecap", "at 1,024 in flight (default cap)")):
                got = [r for r in heads if r.get(p + "_cpu_us") is not None]
                if not got:
                    continue
                pm = lambda k: median([r[k] for r in got])
                figure(hs, "libcurl alone " + label, pm(p + "_cpu_us"), "µs",
                       runs=[round(r[p + "_cpu_us"], 1) for r in got],
                       note="curl_probe, {} requests at once; {} µs CPU per request (user {:.1f}, sys {:.1f}); "
                            "{} /s; nginx {:.1f} µs per request meanwhile; connections opened: {}; peak RSS {:.1f} MiB; "
                            "relay CPU / this: {}".format(
                           ", ".join(str(r[p + "_in_flight"]) for r in got),
                           ", ".join(str(round(r[p + "_cpu_us"], 1)) for r in got),
                           median([r[p + "_user_s"] * 1e6 / r[p + "_requests"] for r in got]),
                           median([r[p + "_sys_s"] * 1e6 / r[p + "_requests"] for r in got]),
                           ", ".join("{:,.0f}".format(r[p + "_rate"]) for r in got),
                           pm(p + "_nginx_cpu_us"), ", ".join(str(r[p + "_connections"]) for r in got),
                           pm(p + "_maxrss_kb") / 1024.0,
                           ", ".join("{:.2f}".format(r[p + "_ratio"]) for r in got if r[p + "_ratio"])),
                       fmt="{:.1f}",
                       shown="{:.1f} µs CPU/request, {:,.0f}/s; relay = {:.2f} ×".format(
                           pm(p + "_cpu_us"), pm(p + "_rate"), pm(p + "_ratio")))

    # The log line's cost (issue 40): pairs of the same HTTP drain, default
    # (info, a line per delivery) against --log-level warn, in alternating
    # order; the relay's CPU per delivery, info minus warn, per pair.
    if log_info and log_warn:
        pairs = [(i, w) for i in log_info for w in log_warn if i["round"] == w["round"]]
        diffs = [i["relay_cpu_us"] - w["relay_cpu_us"] for i, w in pairs]
        figure("headline: the log line", "relay CPU per delivery, info minus warn", median(diffs), "µs",
               1.0, "<=", [round(d, 2) for d in diffs],
               "pairs of {:,}-intent HTTP drains in alternating order; relay µs/delivery info: {}; warn: {}; "
               "log lines written (info): {}; 1-min load average before each drain (info/warn): {}; the drains' "
               "noise is of the line's size, the micro-benchmark below is the figure to judge by".format(
                   int(log_info[0]["intents"]),
                   ", ".join("{:.1f}".format(i["relay_cpu_us"]) for i, _ in pairs),
                   ", ".join("{:.1f}".format(w["relay_cpu_us"]) for _, w in pairs),
                   ", ".join("{:,}".format(int(i.get("relay_log_lines", 0))) for i, _ in pairs),
                   ", ".join("{}/{}".format(i.get("load1_before", "?"), w.get("load1_before", "?")) for i, w in pairs)),
               fmt="{:.2f}",
               shown=None if not diffs else "{:+.2f} µs (median of {} pairs, {:+.2f} to {:+.2f})".format(
                   median(diffs), len(diffs), min(diffs), max(diffs)))
    # The same line without the relay (tests/bench/log_cost.c): relay/lib/log.c
    # writing the attempt line to a file, CPU per line, written once per loop
    # turn as the relay does; a write(2) per line beside it.
    for r in [r for r in raw if r["kind"] == "log_cost"]:
        figure("headline: the log line", "micro-benchmark: format + buffer + write per line", r["turn_us"], "µs",
               1.0, "<=", [],
               "tests/bench/log_cost.c: {:,} attempt lines ({:.0f} bytes each) through relay/lib/log.c to a file, "
               "{} rounds alternating with --log-level warn (no line: {:.3f} µs), the buffer written every {} lines "
               "(one loop turn); process CPU per line minus warn's, median of the rounds ({:.2f} to {:.2f}); a "
               "write(2) per line (before issue 40): {:.2f} µs ({:.2f} to {:.2f}); 1-min load average {}/{}".format(
                   int(r["lines"]), r["bytes_per_line"], int(r["rounds"]), r["none_us"], int(r["per_flush"]),
                   r["turn_min"], r["turn_max"], r["line_us"], r["line_min"], r["line_max"],
                   r.get("load1_before", "?"), r.get("load1_after", "?")),
               fmt="{:.2f}",
               shown="{:.2f} µs ({:.2f} to {:.2f}; a write per line {:.2f})".format(
                   r["turn_us"], r["turn_min"], r["turn_max"], r["line_us"]))

    # ---------------------------------------------------------------- headline over TLS
    # Issue 26: the same rounds against the same nginx over TLS 1.3, its
    # certificate from a throwaway CA (the target's ca_file); libcurl alone
    # over the same TLS at the same concurrency; handshakes = connections
    # nginx accepted; connections open = established sockets at nginx's port.
    if tls_heads or wanted("headline_tls"):
        tn = tls_heads[0]["intents"] if tls_heads else 100000
        ts = "headline over TLS: {:,} intents".format(int(tn))

        def tm(k):
            return median([r[k] for r in tls_heads if r.get(k) is not None])

        figure(ts, "drain intents/s (start to exit)", tm("rate"), "/s",
               runs=[round(r["rate"]) for r in tls_heads],
               note="{}; HTTP rounds above: {}".format(
                   hmeta.get("nginx_tls", "TLS 1.3"),
                   ", ".join(str(round(r["rate"])) for r in heads) or "not run"))
        ratio_t = tm("probe_ratio")
        figure(ts, "relay CPU / libcurl alone over TLS", ratio_t, "x", 1.15, "<=",
               [round(r["probe_ratio"], 2) for r in tls_heads if r.get("probe_ratio") is not None],
               "as the HTTP ratio, both over TLS 1.3 to the same nginx, the probe at the relay's mean in flight "
               "({}); relay µs: {}; libcurl µs: {}".format(
                   ", ".join(str(r.get("probe_in_flight", "?")) for r in tls_heads),
                   ", ".join(str(round(r["relay_cpu_us"], 1)) for r in tls_heads),
                   ", ".join(str(round(r.get("probe_cpu_us", 0), 1)) for r in tls_heads)),
               fmt="{:.2f}",
               shown=None if ratio_t is None else "{:.2f} × (relay {:.1f} µs, libcurl {:.1f} µs)".format(
                   ratio_t, tm("relay_cpu_us"), tm("probe_cpu_us")),
               target_shown="≤ 1.15 × libcurl")
        figure(ts, "relay peak RSS over TLS", tm("relay_maxrss_kb") / 1024.0 if tls_heads else None, "MiB", 24,
               "<=", [round(r["relay_maxrss_kb"] / 1024.0, 1) for r in tls_heads],
               "wait4 ru_maxrss of the relay, default --max-in-flight 1024; libcurl alone over the same TLS at the "
               "relay's mean in flight: {} MiB (an OpenSSL context and session per connection, and record buffers "
               "while a request is under way); connections open at nginx, maximum: relay {}, libcurl alone {} "
               "(the peak follows them: about 51 KiB a connection, docs/performance.md#memory)".format(
                   ", ".join("{:.1f}".format(r.get("probe_maxrss_kb", 0) / 1024.0) for r in tls_heads),
                   ", ".join(str(r.get("conns_max")) for r in tls_heads),
                   ", ".join(str(r.get("probe_conns_max")) for r in tls_heads)),
               fmt="{:.1f}")
        figure(ts, "TLS handshakes per 1,000 deliveries", tm("handshakes_per_1000"), "", 20, "<=",
               [round(r["handshakes_per_1000"], 1) for r in tls_heads],
               "connections nginx accepted during the drain (stub_status) per 1,000 intents; first requests of a "
               "connection seen by nginx: {} (of which TLS resumptions: {}); the floor is nginx's keepalive_requests "
               "1000 (1 per 1,000) plus the ramp-up to the window (up to 1,024 connections per drain, ~10 per 1,000); "
               "libcurl alone at the same concurrency: {} per 1,000; at 1,024 in flight: {}".format(
                   ", ".join(str(r.get("tls_new", "?")) for r in tls_heads),
                   ", ".join(str(r.get("tls_resumed", "?")) for r in tls_heads),
                   ", ".join("{:.1f}".format(r.get("probe_handshakes_per_1000", 0)) for r in tls_heads),
                   ", ".join("{:.1f}".format(r.get("probecap_handshakes_per_1000", 0)) for r in tls_heads)),
               fmt="{:.1f}", target_shown="≤ 20 (none per delivery)",
               shown=None if not tls_heads else "{:.1f} ({:,.0f} per drain)".format(
                   tm("handshakes_per_1000"), tm("nginx_accepts")))
        figure(ts, "connections open at nginx", tm("conns_max"), "",
               runs=[r.get("conns_max") for r in tls_heads],
               note="established sockets on nginx's TLS port every 0.2 s during the drain: maximum {}, mean {}; "
                    "libcurl alone at the relay's mean in flight: maximum {}; HTTP drains above: maximum {}".format(
                        ", ".join(str(r.get("conns_max")) for r in tls_heads),
                        ", ".join(str(r.get("conns_mean")) for r in tls_heads),
                        ", ".join(str(r.get("probe_conns_max", "?")) for r in tls_heads),
                        ", ".join(str(r.get("conns_max", "?")) for r in heads) or "not run"),
               fmt="{:.0f}", shown=None if not tls_heads else "max {:.0f}, mean {:.0f}".format(
                   tm("conns_max"), tm("conns_mean")))
        if tls_heads:
            figure(ts, "CPU per intent, each process", tm("relay_cpu_us") + tm("pg_cpu_us") + tm("nginx_cpu_us"),
                   "µs", runs=[round(r["relay_cpu_us"] + r["pg_cpu_us"] + r["nginx_cpu_us"], 1) for r in tls_heads],
                   note="medians: relay {:.1f} µs (HTTP: {}), PostgreSQL {:.1f} µs, nginx {:.1f} µs (its access log on "
                        "the TLS server included); relay peak RSS {:.1f} MiB".format(
                       tm("relay_cpu_us"),
                       "{:.1f}".format(median([r["relay_cpu_us"] for r in heads])) if heads else "not run",
                       tm("pg_cpu_us"), tm("nginx_cpu_us"), tm("relay_maxrss_kb") / 1024.0),
                   fmt="{:.1f}", shown="relay {:.1f} + PG {:.1f} + nginx {:.1f} µs".format(
                       tm("relay_cpu_us"), tm("pg_cpu_us"), tm("nginx_cpu_us")))
        if tls_b:
            # Before/after in one run (BENCH_RELAY_B): pairs of TLS drains in
            # alternating order, the relay under test (A) and another binary (B).
            pairs = [(a, b) for a in tls_heads for b in tls_b if a["round"] == b["round"]]
            bm = lambda k: median([b[k] for b in tls_b if b.get(k) is not None])
            figure(ts, "relay B (BENCH_RELAY_B) peak RSS over TLS", bm("relay_maxrss_kb") / 1024.0, "MiB", 24, "<=",
                   [round(b["relay_maxrss_kb"] / 1024.0, 1) for b in tls_b],
                   "B = {}; per pair (round: A / B): peak RSS MiB, intents/s, relay µs per delivery, connections "
                   "open at nginx max/mean, accepted: {}".format(
                       tls_b[0].get("relay_b", "?"),
                       "; ".join("{}: {:.1f}/{:.1f} MiB, {:,.0f}/{:,.0f}/s, {:.1f}/{:.1f} µs, {}/{} max, {}/{} mean, "
                                 "{}/{}".format(
                                     a["round"], a["relay_maxrss_kb"] / 1024.0, b["relay_maxrss_kb"] / 1024.0,
                                     a["rate"], b["rate"], a["relay_cpu_us"], b["relay_cpu_us"],
                                     a.get("conns_max"), b.get("conns_max"), a.get("conns_mean"), b.get("conns_mean"),
                                     a.get("nginx_accepts"), b.get("nginx_accepts")) for a, b in pairs)),
                   fmt="{:.1f}",
                   shown="{:.1f} MiB (A {:.1f}), {:,.0f}/s (A {:,.0f}), {:.1f} µs (A {:.1f})".format(
                       bm("relay_maxrss_kb") / 1024.0, tm("relay_maxrss_kb") / 1024.0, bm("rate"), tm("rate"),
                       bm("relay_cpu_us"), tm("relay_cpu_us")))
        for r in storms:
            base_hs = tm("nginx_accepts")
            base_cpu = tm("relay_cpu_us")
            base_wall = tm("wall_s")
            figure(ts, "reconnect storm (nginx reloaded)", r["nginx_accepts"] - (base_hs or 0), "handshakes",
                   note="one more TLS drain, nginx reloaded (SIGHUP) at {} s when a third had succeeded: {:,} "
                        "handshakes (plain TLS drains: {}), attempts {:,} for {:,} intents ({} succeeded), relay CPU "
                        "{:.1f} µs per intent ({}), drain {:.1f} s ({}), connections open max {}".format(
                            r.get("storm_at_s"), r["nginx_accepts"],
                            "{:,.0f}".format(base_hs) if base_hs is not None else "not run",
                            r["attempts"], r["intents"], r["succeeded"], r["relay_cpu_us"],
                            "{:+.1f} % vs the plain TLS median".format((r["relay_cpu_us"] / base_cpu - 1) * 100)
                            if base_cpu else "no plain TLS round",
                            r["wall_s"], "{:+.2f} s".format(r["wall_s"] - base_wall) if base_wall else "-",
                            r.get("conns_max")),
                   fmt="{:,.0f}", shown="+{:,.0f} handshakes, relay CPU {}".format(
                       r["nginx_accepts"] - (base_hs or 0),
                       "{:+.1f} %".format((r["relay_cpu_us"] / base_cpu - 1) * 100) if base_cpu else "?"))

    # ---------------------------------------------------------------- drains
    drains = [r for r in raw if r["kind"] == "drain"]
    by_round = {}
    for r in drains:
        r["rate"] = r["intents"] / r["wall_s"] if r["wall_s"] > 0 else 0.0
        r["relay_cpu_us"] = (r["relay_user_s"] + r["relay_sys_s"]) * 1e6 / r["intents"]
        r["pg_cpu_us"] = r["pg_cpu_s"] * 1e6 / r["intents"]
        r["receiver_cpu_us"] = r["receiver_cpu_s"] * 1e6 / r["intents"]
        r["all_cpu_us"] = r["relay_cpu_us"] + r["pg_cpu_us"] + r["receiver_cpu_us"]
        by_round.setdefault(r["round"], {})[r["variant"]] = r
    one = [r for r in drains if r["variant"] == "one"]
    n_drain = one[0]["intents"] if one else meta.get("drain_intents", "?")
    if wanted("drain"):
        figure(f"drain {int(n_drain):,} intents, 1 relay", "intents/s (start to exit)",
               median([r["rate"] for r in one]), "/s", 25000, ">=",
               [round(r["rate"]) for r in one],
               f"batch-size {meta.get('batch_size')}, max-in-flight {meta.get('max_in_flight')}")
    # `defaults`: the same drain on stock PostgreSQL settings, a target with
    # only name and url and a relay with no tuning options. Judged by its
    # ratio to the tuned drain of the same round.
    dflt = [r for r in drains if r["variant"] == "defaults"]
    if wanted("defaults"):
        d_rate = median([r["rate"] for r in dflt])
        d_ratios = [v["defaults"]["rate"] / v["one"]["rate"] for v in by_round.values()
                    if "defaults" in v and "one" in v]
        d_ratio = median(d_ratios)
        note = "stock postgresql.conf, relay {}, target name+url ({}); runs /s: {}".format(
            (meta.get("defaults_relay_options") or "").strip(), meta.get("defaults_target", ""),
            ", ".join(str(round(r["rate"])) for r in dflt))
        extra = {"intents_per_s": d_rate, "tuned_intents_per_s": median([r["rate"] for r in one])}
        if d_ratios:
            figure("drain, defaults", "intents/s; / tuned", d_ratio, "x", 0.8, ">=",
                   [round(x, 3) for x in d_ratios], note, fmt="{:.2f}",
                   shown="{:,.0f}/s = {:.2f} × tuned".format(d_rate, d_ratio),
                   target_shown="≥ 0.80 × tuned", extra=extra)
        else:
            # No tuned drain to compare with (BENCH_ONLY without drain) or it broke.
            figure("drain, defaults", "intents/s (start to exit)", d_rate, "/s",
                   runs=[round(r["rate"]) for r in dflt],
                   note=note + ("" if d_rate is None else "; no tuned drain to compare with"),
                   extra=extra)
    ratios = [v["no_analyze"]["rate"] / v["one"]["rate"] for v in by_round.values()
              if "no_analyze" in v and "one" in v]
    if wanted("no_analyze"):
        figure("drain before ANALYZE", "rate / rate after ANALYZE", median(ratios), "x",
               0.9, ">=", [round(x, 3) for x in ratios], fmt="{:.2f}")
        # CPU per intent is far less sensitive to a noisy machine than wall time.
        cpu = [v["one"]["pg_cpu_us"] / v["no_analyze"]["pg_cpu_us"] for v in by_round.values()
               if "no_analyze" in v and "one" in v and v["no_analyze"]["pg_cpu_us"] > 0]
        if cpu:
            figure("drain before ANALYZE", "PG CPU/intent after / before", median(cpu), "x",
                   runs=[round(x, 3) for x in cpu],
                   note="above 1: the un-analyzed drain costs PostgreSQL less CPU", fmt="{:.2f}")
    if wanted("drain"):
        figure("drain: relay CPU", "user+sys per intent", median([r["relay_cpu_us"] for r in one]),
               "µs", 25, "<=", [round(r["relay_cpu_us"], 1) for r in one], fmt="{:.1f}")
        figure("drain: relay+PG+receiver CPU", "user+sys per intent",
               median([r["all_cpu_us"] for r in one]), "µs", 60, "<=",
               [round(r["all_cpu_us"], 1) for r in one],
               "PostgreSQL {:.1f} µs, receiver {:.1f} µs, relay {:.1f} µs (medians)".format(
                   median([r["pg_cpu_us"] for r in one]),
                   median([r["receiver_cpu_us"] for r in one]),
                   median([r["relay_cpu_us"] for r in one])) if one else "", fmt="{:.1f}")
    if wanted("defaults") and dflt:
        figure("drain, defaults: relay CPU", "user+sys per intent",
               median([r["relay_cpu_us"] for r in dflt]), "µs",
               runs=[round(r["relay_cpu_us"], 1) for r in dflt],
               note="all CPU {:.1f} µs (PostgreSQL {:.1f}, receiver {:.1f}) per intent (medians)".format(
                   median([r["all_cpu_us"] for r in dflt]), median([r["pg_cpu_us"] for r in dflt]),
                   median([r["receiver_cpu_us"] for r in dflt])), fmt="{:.1f}")
    two = [v["two"]["rate"] / v["one"]["rate"] for v in by_round.values() if "two" in v and "one" in v]
    if wanted("two_relays"):
        tw = [r for r in drains if r["variant"] == "two"]
        figure("drain: two relays vs one", "rate ratio", median(two), "x", None, None,
               [round(x, 3) for x in two],
               "two relays: {:,.0f}/s median; relay CPU {:.1f} µs, all CPU {:.1f} µs per intent".format(
                   median([r["rate"] for r in tw]) or 0,
                   median([r["relay_cpu_us"] for r in tw]) or 0,
                   median([r["all_cpu_us"] for r in tw]) or 0) if tw else "",
               fmt="{:.2f}")
    four = [v["four"]["rate"] / v["one"]["rate"] for v in by_round.values() if "four" in v and "one" in v]
    if wanted("four_relays"):
        fr = [r for r in drains if r["variant"] == "four"]
        figure("drain: four relays vs one", "rate ratio", median(four), "x", None, None,
               [round(x, 3) for x in four],
               "four relays: {:,.0f}/s median; relay CPU {:.1f} µs, PostgreSQL {:.1f} µs per intent".format(
                   median([r["rate"] for r in fr]) or 0,
                   median([r["relay_cpu_us"] for r in fr]) or 0,
                   median([r["pg_cpu_us"] for r in fr]) or 0) if fr else "",
               fmt="{:.2f}")

    # ---------------------------------------------------------------- slow target
    # A default relay against a target that answers in 2 s: the drain is bound
    # by the in-flight cap over the latency; the figures are the database's
    # cost of a delivery whose row is held for seconds (lease renewal: 0033).
    slows = [r for r in raw if r["kind"] == "slow_target"]
    if wanted("slow_target"):
        r = slows[0] if slows else None
        scen = "slow target ({} s answers), defaults: {:,} intents".format(
            (r["delay_ms"] if r else 2000) / 1000.0, int(r["intents"]) if r else 20000)
        if r is None:
            figure(scen, "PostgreSQL CPU per delivery", None, "µs")
        else:
            n = r["intents"]
            rate = n / r["wall_s"] if r["wall_s"] > 0 else 0.0
            bound = r["max_in_flight"] * 1000.0 / r["delay_ms"]
            figure(scen, "drain / (in flight ÷ latency)", rate / bound, "x", fmt="{:.2f}",
                   shown="{:,.0f}/s = {:.2f} × {:,} / {:.0f} s".format(rate, rate / bound, int(r["max_in_flight"]),
                                                                   r["delay_ms"] / 1000.0),
                   note="stock postgresql.conf, relay {}, target name+url, build/test-receiver --delay-ms {}; "
                        "the receiver counted {:,} requests".format(
                            (meta.get("defaults_relay_options") or "").strip(), int(r["delay_ms"]),
                            int(r["deliveries"])))
            figure(scen, "PostgreSQL CPU per delivery", r["pg_cpu_s"] * 1e6 / n, "µs", fmt="{:.1f}",
                   note="postmaster + every backend and auxiliary process, /proc ticks before and after the drain")
            figure(scen, "WAL per delivery", r["wal_bytes"] / n, "B", fmt="{:,.0f}",
                   note="pg_current_wal_insert_lsn() before and after the drain")
            figure(scen, "relay CPU per delivery", (r["relay_user_s"] + r["relay_sys_s"]) * 1e6 / n, "µs",
                   fmt="{:.1f}")

    # ---------------------------------------------------------------- ordered
    # Ordered delivery (issue 14): 1,000 groups x 10 steps, each step sent
    # only after the one before succeeded, against the unordered rate: the
    # `drain` row's (100,000 intents) when it ran, else the unordered drain
    # of as many intents run beside it in each round.
    ordd = [r for r in drains if r["variant"] == "ordered"]
    small = [r for r in drains if r["variant"] == "unordered_small"]
    om = next((r for r in raw if r["kind"] == "ordered_meta"), {})
    if wanted("ordered") or ordd:
        o_rate = median([r["rate"] for r in ordd])
        base = one if one else small
        u_rate = median([r["rate"] for r in base])
        same = [v["ordered"]["rate"] / v["unordered_small"]["rate"] for v in by_round.values()
                if "ordered" in v and "unordered_small" in v and v["unordered_small"]["rate"] > 0]
        ratio = o_rate / u_rate if o_rate and u_rate else None
        figure("ordered drain {:,} groups x {} steps, 1 relay".format(om.get("groups", 1000), om.get("steps", 10)),
               "intents/s; / unordered", ratio, "x", 0.5, ">=", [round(r["rate"]) for r in ordd],
               "unordered: {} {:,.0f}/s; an unordered drain of as many intents beside it: {:,.0f}/s, ratio {} "
               "(runs: {}); CPU per intent ordered {:.1f} µs (relay {:.1f}, PostgreSQL {:.1f}), unordered {:.1f} µs".format(
                   "the drain row's" if one else "as many intents,", u_rate or 0,
                   median([r["rate"] for r in small]) or 0,
                   "{:.2f}".format(median(same)) if same else "-", ", ".join(str(round(x, 3)) for x in same),
                   median([r["all_cpu_us"] for r in ordd]) or 0, median([r["relay_cpu_us"] for r in ordd]) or 0,
                   median([r["pg_cpu_us"] for r in ordd]) or 0, median([r["all_cpu_us"] for r in small]) or 0),
               fmt="{:.2f}",
               shown=None if ratio is None else "{:,.0f}/s = {:.2f} × unordered".format(o_rate, ratio),
               target_shown="≥ 0.50 × unordered",
               extra={"intents_per_s": o_rate, "unordered_intents_per_s": u_rate})

    # ---------------------------------------------------------------- trickle
    trickles = [r for r in raw if r["kind"] == "trickle"]
    for r in trickles:
        r.update(trickle_latencies(r))
        r["relay_cpu_us"] = r["relay_cpu_s"] * 1e6 / max(1, r["samples"])
    if wanted("trickle") and not trickles:
        figure("trickle 200/s, commit → arrival", "p50", None, "ms", 0.6, "<=")
    if trickles:
        note = "{} samples, {} missing; max {:.2f} ms; enqueue commit p50 {:.2f} ms".format(
            sum(r["samples"] for r in trickles), sum(r["missing"] for r in trickles),
            max(r["max_ms"] or 0 for r in trickles),
            median([r["enqueue_commit_p50_ms"] for r in trickles]))
        figure("trickle 200/s, commit → arrival", "p50", median([r["p50_ms"] for r in trickles]),
               "ms", 0.6, "<=", [round(r["p50_ms"], 3) for r in trickles], note, fmt="{:.2f}")
        figure("trickle 200/s, commit → arrival", "p99", median([r["p99_ms"] for r in trickles]),
               "ms", 2.5, "<=", [round(r["p99_ms"], 3) for r in trickles], fmt="{:.2f}")

    # ---------------------------------------------------------------- held snapshot
    # Issue 40, item 6 (tests/bench/held.sh): p99 through the hold ≤ 2 × the p99 before it.
    for r in [r for r in raw if r["kind"] == "held"]:
        r.update(held_figures(r))
        scen = "held snapshot {}/s".format(r["rate_per_s"])
        before = next((p for p in r["phases"] if p["phase"] == "before"), None)
        limit = 2 * before["settled_p99_ms"] if before and before["settled_p99_ms"] is not None else None
        for p in r["phases"]:
            hold = p["phase"].startswith("hold")
            figure(scen, "commit → settled p99, " + p["phase"], p["settled_p99_ms"], "ms",
                   limit if hold else None, "<=" if hold and limit is not None else None,
                   note="p50 {:.1f} ms; commit → arrival p50 {:.1f} / p99 {:.1f} ms; {} intents".format(
                       p["settled_p50_ms"] or 0, p["arrival_p50_ms"] or 0, p["arrival_p99_ms"] or 0,
                       p["samples"]), fmt="{:.1f}",
                   target_shown="≤ {:.1f} ms (2 × before)".format(limit) if hold and limit else None)
        sm = r["samples"]

        def at(phase):
            xs = [x for x in sm if x["phase"] == phase]
            return xs[-1] if xs else None
        b, e, f_ = at("hold_start"), at("hold_end"), at("end")
        if b and e and f_:
            figure(scen, "intents size: hold start → hold end → end", f_["total_bytes"] / 2**20, "MiB",
                   shown="{:.1f} → {:.1f} → {:.1f} MiB".format(b["total_bytes"] / 2**20, e["total_bytes"] / 2**20,
                                                             f_["total_bytes"] / 2**20),
                   note="dead versions {} → {} → {}; autovacuums of intents after the hold {}; heap {:.1f} → {:.1f} MiB; "
                        "PostgreSQL CPU per intent before / during / after: {}".format(
                            b["dead"], e["dead"], f_["dead"], f_["autovacuums"] - e["autovacuums"],
                            e["heap_bytes"] / 2**20, f_["heap_bytes"] / 2**20,
                            " / ".join("{:.0f} µs".format(x) for x in held_per_intent(sm, "pg_cpu_s", 1e6))))
            for field, what in (("heap_blks", "buffers per intent in intents' heap"),
                                ("due_blks", "buffers per intent in intents_due"),
                                ("in_flight_blks", "buffers per intent in intents_in_flight"),
                                ("relays_blks", "buffers per intent in outbox.relays' heap"),
                                ("in_flight_tups", "index tuples read per intent in intents_in_flight"),
                                ("relays_updates", "updates of outbox.relays per intent")):
                xs = held_per_intent(sm, field)
                if len(xs) == 3:
                    figure(scen, what + ": before / hold / after", xs[1], "",
                           shown="{:.2f} / {:.2f} / {:.2f}".format(*xs))

    # ---------------------------------------------------------------- enqueue
    pgb = [r for r in raw if r["kind"] == "pgbench"]
    tps = {}
    rounds = {}
    for r in pgb:
        tps.setdefault(r["variant"], []).append(r["tps"])
        rounds.setdefault(r["round"], {})[r["variant"]] = r["tps"]

    def ratio(a, b):
        xs = [v[a] / v[b] for v in rounds.values() if a in v and b in v and v[b] > 0]
        return median(xs), [round(x, 3) for x in xs]

    if wanted("enqueue") and not pgb:
        figure("enqueue: plain INSERT vs enqueue", "tx/s ratio plain/enqueue", None, "x", 1.3, "<=")
    if pgb:
        live = [r for r in pgb if r["variant"] == "enqueue_live_relay"]
        for v in ("plain", "enqueue", "enqueue_idle_relay", "enqueue_live_relay", "enqueue_no_triggers"):
            if v in tps:
                note = ""
                if v == "enqueue_live_relay" and live:
                    note = "a relay draining meanwhile (it shares the CPU); its idle flag was up in {} of {} samples".format(
                        sum(r.get("idle_samples", 0) for r in live), sum(r.get("idle_sampled", 0) for r in live))
                figure("enqueue: pgbench 8 clients", f"{v} tx/s", median(tps[v]), "tx/s",
                       runs=[round(x) for x in tps[v]], note=note)
        m, xs = ratio("plain", "enqueue")
        figure("enqueue: plain INSERT vs enqueue", "tx/s ratio plain/enqueue", m, "x", 1.3, "<=",
               xs, "no relay idle: the trigger runs, no NOTIFY", fmt="{:.2f}")
        m, xs = ratio("plain", "enqueue_idle_relay")
        figure("enqueue with a relay idle", "tx/s ratio plain/enqueue", m, "x", runs=xs,
               note="idle flag set: every enqueue NOTIFYs", fmt="{:.2f}")
        m, xs = ratio("enqueue_no_triggers", "enqueue")
        figure("enqueue: cost of the NOTIFY trigger", "tx/s ratio no-triggers/triggers", m, "x",
               runs=xs, note="no relay idle", fmt="{:.2f}")
        m, xs = ratio("enqueue", "enqueue_idle_relay")
        figure("enqueue: cost of NOTIFY (relay idle)", "tx/s ratio none-idle/idle", m, "x",
               runs=xs, fmt="{:.2f}")

    # ---------------------------------------------------------------- memory
    # The bound of README ("Memory"): peak RSS <= base + in_flight x
    # (response cap + overhead) + 3 x 4 MiB (one record batch's bodies, their
    # escaped array, libpq's copy of it). MEMORY_BASE_MIB and
    # MEMORY_OVERHEAD_KIB are the documented figures (measured, rounded up);
    # the rows below check them and judge the cap run against the bound.
    MEMORY_BASE_MIB = 12.0
    MEMORY_OVERHEAD_KIB = 36.0
    MEMORY_RECORD_MIB = 3 * 4.0
    CURL_BUFFER_KIB = 16.0  # libcurl's receive buffer per handle: small answers leave it untouched

    def memory_bound_mib(base_mib, in_flight, cap_bytes, overhead_kib):
        return base_mib + in_flight * (cap_bytes / 1024.0 + overhead_kib) / 1024.0 + MEMORY_RECORD_MIB

    mem = [r for r in raw if r["kind"] == "memory"]
    small = [r for r in mem if r.get("variant", "small") == "small"]
    capped = [r for r in mem if r.get("variant") == "cap"]
    if wanted("memory") and not small:
        figure("memory: 1,000 deliveries in flight", "relay peak RSS (VmHWM)", None, "MiB", 32, "<=")
    idle_mib = median([r.get("idle_maxrss_kb", 0) / 1024.0 for r in mem]) if mem else None
    overheads = [(r["vmhwm_kb"] - r.get("idle_maxrss_kb", 0)) / float(r.get("in_flight_cap", 1000))
                 for r in small]
    overhead_kib = median(overheads) + CURL_BUFFER_KIB if overheads else None
    if small:
        figure("memory: 1,000 deliveries in flight", "relay peak RSS (VmHWM)",
               median([r["vmhwm_kb"] / 1024.0 for r in small]), "MiB", 32, "<=",
               [round(r["vmhwm_kb"] / 1024.0, 1) for r in small],
               "small responses; up to {} rows seen in state in_flight (deliveries plus outcomes not yet recorded); wait4 maxrss {:.1f} MiB; the same relay with nothing "
               "to deliver: {:.1f} MiB".format(
                   max(r["max_in_flight_seen"] for r in small),
                   median([r["maxrss_kb"] / 1024.0 for r in small]), idle_mib), fmt="{:.1f}")
        figure("memory: bound, base", "idle relay peak RSS", idle_mib, "MiB", MEMORY_BASE_MIB, "<=",
               [round(r.get("idle_maxrss_kb", 0) / 1024.0, 1) for r in small],
               "the relay with nothing to deliver (wait4 maxrss): base of the bound", fmt="{:.1f}")
        figure("memory: bound, overhead", "per delivery", overhead_kib, "KiB", MEMORY_OVERHEAD_KIB, "<=",
               [round(x + CURL_BUFFER_KIB, 1) for x in overheads],
               "(small-response peak - idle) / in-flight cap = {:.1f} KiB, + {:.0f} KiB of libcurl's "
               "receive buffer that a response at the cap fills".format(median(overheads), CURL_BUFFER_KIB),
               fmt="{:.1f}")
    if wanted("memory") and not capped:
        figure("memory: 1,000 in flight, 64 KiB responses", "relay peak RSS (VmHWM)", None, "MiB")
    if capped:
        n = capped[0].get("in_flight_cap", 1000)
        cap = capped[0].get("response_cap_bytes", 65536)
        bound = memory_bound_mib(MEMORY_BASE_MIB, n, cap, MEMORY_OVERHEAD_KIB)
        measured_bound = (memory_bound_mib(idle_mib, n, cap, overhead_kib)
                          if idle_mib is not None and overhead_kib is not None else None)
        figure("memory: {:,} in flight, {:.0f} KiB responses".format(n, cap / 1024.0),
               "relay peak RSS (VmHWM)", median([r["vmhwm_kb"] / 1024.0 for r in capped]), "MiB",
               round(bound, 1), "<=", [round(r["vmhwm_kb"] / 1024.0, 1) for r in capped],
               "bound {:.0f} MiB + {:,} x ({:.0f} KiB + {:.0f} KiB) + 3 x 4 MiB = {:.1f} MiB{}; "
               "up to {} rows seen in state in_flight (deliveries plus outcomes not yet recorded: "
               "above {:,}, bodies wait beyond the in-flight cap)".format(
                   MEMORY_BASE_MIB, n, cap / 1024.0, MEMORY_OVERHEAD_KIB, bound,
                   "" if measured_bound is None else
                   "; with this run's base and overhead {:.1f} MiB".format(measured_bound),
                   max(r["max_in_flight_seen"] for r in capped), n), fmt="{:.1f}",
               extra={"bound_mib": bound, "bound_measured_mib": measured_bound})

    # ---------------------------------------------------------------- history
    hist = [r for r in raw if r["kind"] == "history"]
    hrounds = {}
    for r in hist:
        r["rate"] = r["intents"] / r["wall_s"] if r["wall_s"] > 0 else 0.0
        hrounds.setdefault(r["round"], {})[r["variant"]] = r
    hr = [v["history"]["rate"] / v["empty"]["rate"] for v in hrounds.values()
          if "history" in v and "empty" in v]
    hcpu = [(v["empty"]["pg_cpu_s"] / v["empty"]["intents"]) / (v["history"]["pg_cpu_s"] / v["history"]["intents"])
            for v in hrounds.values() if "history" in v and "empty" in v and v["history"]["pg_cpu_s"] > 0]
    if wanted("history") and not hr:
        figure("history: 2M terminal rows vs empty", "drain rate ratio", None, "x", 0.8, ">=")
    if hr:
        loads = [r for r in raw if r["kind"] == "history_load"]
        figure("history: 2M terminal rows vs empty", "drain rate ratio", median(hr), "x", 0.8, ">=",
               [round(x, 3) for x in hr],
               "empty {:,.0f}/s, with history {:,.0f}/s{}".format(
                   median([r["rate"] for r in hist if r["variant"] == "empty"]) or 0,
                   median([r["rate"] for r in hist if r["variant"] == "history"]) or 0,
                   "; intents {} MB, attempts {} MB".format(loads[0]["intents_mb"], loads[0]["attempts_mb"])
                   if loads else ""), fmt="{:.2f}")
        if hcpu:
            figure("history: 2M terminal rows vs empty", "PG CPU/intent empty / history",
                   median(hcpu), "x", runs=[round(x, 3) for x in hcpu],
                   note="below 1: history makes PostgreSQL spend more CPU per intent", fmt="{:.2f}")

    # ---------------------------------------------------------------- retention
    ret = [r for r in raw if r["kind"] == "retention"]
    if wanted("retention") and not ret:
        figure("retention: steady state", "table size end / start", None, "x", 1.05, "<=")
    for r in ret:
        g = json.loads(r["figures"])
        scen = "retention: {:,}/s for {} s, retain_for 1 min".format(r["rate"], r["seconds"])
        total_start = g["intents_b_start"] + g["attempts_b_start"] + g["tombstones_b_start"]
        total_end = g["intents_b_end"] + g["attempts_b_end"] + g["tombstones_b_end"]
        mib = lambda b: b / 1048576.0
        figure(scen, "table size end / start", total_end / total_start if total_start else None, "x", 1.05, "<=",
               note="intents {:.1f} -> {:.1f} MiB, attempts {:.1f} -> {:.1f} MiB, tombstones {:.1f} -> {:.1f} MiB "
                    "(t={} s -> {} s, heap + indexes); intent rows {:,} -> {:,}".format(
                   mib(g["intents_b_start"]), mib(g["intents_b_end"]), mib(g["attempts_b_start"]),
                   mib(g["attempts_b_end"]), mib(g["tombstones_b_start"]), mib(g["tombstones_b_end"]),
                   g["start_t"], g["end_t"], g["intent_rows_start"], g["intent_rows_end"]), fmt="{:.2f}")
        figure(scen, "drain rate last / first minute",
               g["last_min_rate"] / g["first_min_rate"] if g["first_min_rate"] else None, "x", 0.9, ">=",
               note="delivered: first minute {:,.0f}/s, last minute {:,.0f}/s; enqueued: {:,.0f}/s and {:,.0f}/s "
                    "(pgbench {} tx/s over the run)".format(
                   g["first_min_rate"], g["last_min_rate"], g.get("first_min_enqueued", 0),
                   g.get("last_min_enqueued", 0), r.get("pgbench_tps")), fmt="{:.2f}")
        figure(scen, "prune cost per row", g["prune_ms"] * 1000.0 / g["pruned"] if g["pruned"] else None, "µs",
               note="{:,} rows in {} runs, {:,} ms in all".format(g["pruned"], g["prune_runs"], g["prune_ms"]),
               fmt="{:.1f}")
        figure(scen, "p99 enqueue latency during prunes", g["p99_in_prune_ms"], "ms",
               note="{:,} of {:,} enqueues ended during a prune; p99 outside prunes {} ms".format(
                   g["enq_in_prune"], g["enqueues"], g["p99_outside_ms"]), fmt="{:.2f}")
        if r.get("tombstone_rows"):
            figure(scen, "tombstone size per key", (r["tombstone_heap_b"] + r["tombstone_index_b"]) / r["tombstone_rows"],
                   "bytes", note="{:,} tombstones: heap {:.0f} + indexes {:.0f} bytes per key".format(
                       r["tombstone_rows"], r["tombstone_heap_b"] / r["tombstone_rows"],
                       r["tombstone_index_b"] / r["tombstone_rows"]), fmt="{:.0f}")

    # ---------------------------------------------------------------- databases
    # Issue 38: one relay over four databases (--databases) against four
    # relays of one database each, same load, defaults (tests/bench/databases.sh).
    # Ratios within a round (the two drains of a round run back to back).
    dbs = [r for r in raw if r["kind"] == "databases"]
    dmeta = next((r for r in raw if r["kind"] == "databases_meta"), {})
    if wanted("databases") and not dbs:
        figure("databases: one relay over 4 vs 4 relays", "throughput one / four", None, "x", 0.9, ">=")
    if dbs:
        for r in dbs:
            n = r["intents"]
            r["rate"] = n / r["wall_s"] if r["wall_s"] > 0 else 0.0
            r["relay_cpu_us"] = (r["relay_user_s"] + r["relay_sys_s"]) * 1e6 / n
            r["pg_cpu_us"] = r["pg_cpu_s"] * 1e6 / n
            r["rss_mean_kb"] = r["rss_sum_kb"] / r["processes"]
        rounds = {}
        for r in dbs:
            rounds.setdefault(r["round"], {})[r["variant"]] = r
        pairs = [v for _, v in sorted(rounds.items()) if "one" in v and "four" in v]
        one = [p["one"] for p in pairs]
        four = [p["four"] for p in pairs]
        dm = lambda rs, k: median([r[k] for r in rs])
        ds = "databases: {:,} intents in each of 4, defaults".format(int(dmeta.get("intents_per_database", 0)))
        rate_ratio = [p["one"]["rate"] / p["four"]["rate"] for p in pairs if p["four"]["rate"] > 0]
        rss_ratio = [p["one"]["rss_max_kb"] / p["four"]["rss_mean_kb"] for p in pairs if p["four"]["rss_mean_kb"] > 0]
        loads = ", ".join(str(r.get("load1", "?")) for r in dbs)
        figure(ds, "deliveries/s, one relay | four relays", median(rate_ratio) if pairs else None, "x", 0.9, ">=",
               [round(x, 3) for x in rate_ratio],
               "one relay {} /s, four relays {} /s per round (start to the last exit); attempts beyond one per "
               "intent (retries after a timeout): one relay {}, four relays {}; 1-min load average at each drain's "
               "end: {}".format(", ".join("{:,.0f}".format(r["rate"]) for r in one),
                                ", ".join("{:,.0f}".format(r["rate"]) for r in four),
                                ", ".join(str(r.get("attempts", r["intents"]) - r["intents"]) for r in one),
                                ", ".join(str(r.get("attempts", r["intents"]) - r["intents"]) for r in four), loads),
               fmt="{:.2f}",
               shown=None if not pairs else "{:,.0f} | {:,.0f} /s = {:.2f} ×".format(
                   dm(one, "rate"), dm(four, "rate"), median(rate_ratio)),
               target_shown="within 10 % of the 4 relays' (≥ 0.90 ×)")
        if pairs:
            figure(ds, "relay CPU per delivery, one | four", dm(one, "relay_cpu_us"), "µs",
                   runs=["{:.1f}|{:.1f}".format(p["one"]["relay_cpu_us"], p["four"]["relay_cpu_us"]) for p in pairs],
                   note="relays' user+sys (wait4) / intents; PostgreSQL CPU per delivery: one relay {:.1f} µs, "
                        "four relays {:.1f} µs (medians)".format(dm(one, "pg_cpu_us"), dm(four, "pg_cpu_us")),
                   fmt="{:.1f}",
                   shown="{:.1f} | {:.1f} µs (PG {:.1f} | {:.1f})".format(
                       dm(one, "relay_cpu_us"), dm(four, "relay_cpu_us"), dm(one, "pg_cpu_us"), dm(four, "pg_cpu_us")))
            figure(ds, "peak RSS, one process / a one-database relay", median(rss_ratio), "x", 1.5, "<=",
                   [round(x, 2) for x in rss_ratio],
                   "wait4 maxrss: the one relay {} MiB; the four relays' {} MiB (each, per round)".format(
                       ", ".join("{:.1f}".format(r["rss_max_kb"] / 1024.0) for r in one),
                       "; ".join(" ".join("{:.1f}".format(int(x) / 1024.0) for x in str(r["rss_kb"]).split())
                                 for r in four)),
                   fmt="{:.2f}",
                   shown="{:.1f} MiB / {:.1f} MiB = {:.2f} × (four together {:.1f} MiB)".format(
                       dm(one, "rss_max_kb") / 1024.0, dm(four, "rss_mean_kb") / 1024.0, median(rss_ratio),
                       dm(four, "rss_sum_kb") / 1024.0),
                   target_shown="≤ 1.50 × a one-database relay's")

    # ---------------------------------------------------------------- mcp
    # Issue 23: the front door with defaults, 64 SDK-free clients, a target
    # that answers at once (tests/bench/mcp.sh).
    mcps = [r for r in raw if r["kind"] == "mcp"]
    if wanted("mcp") and not mcps:
        figure("mcp: 64 clients, defaults", "calls/s", None, "/s", 4000, ">=")
    for r in mcps:
        upstream = r.get("variant") == "upstream_mcp"
        scen = "mcp: {} clients, defaults".format(r["connections"])
        if upstream:  # issue 36: the target is an MCP server (an SDK McpServer): no aims, beside the webhook's
            scen = "mcp: {} clients, target an upstream MCP server".format(r["connections"])
            secs = r["seconds"] or 1
            figure(scen, "calls/s", r["succeeded"] / secs, "/s",
                   note="{:,} succeeded, {:,} other answers in {:.1f} s".format(r["succeeded"], r["other"], secs))
            figure(scen, "p50 request to result", r["p50_us"] / 1000.0, "ms", fmt="{:.2f}")
            figure(scen, "p99 request to result", r["p99_us"] / 1000.0, "ms", fmt="{:.2f}")
            figure(scen, "answers not succeeded", r["other"], "calls", 0, "<=")
            continue
        calls = r["succeeded"] + r["other"]
        secs = r["seconds"] or 1
        per = lambda s: s * 1e6 / calls if calls else None
        # Issue 40, item 2: the database's share first (it moves least with
        # the machine's load), then the rate and the latencies.
        batched = r.get("batched_calls")
        figure(scen, "PostgreSQL CPU per call", per(r["postgres_cpu_s"]), "µs", 250, "<=",
               note="every process of its cluster, /proc ticks over the window{}".format(
                   "; {:,} of the calls enqueued in {:,} batches".format(batched, r.get("batches", 0))
                   if batched is not None else ""), fmt="{:.0f}")
        figure(scen, "calls/s", r["succeeded"] / secs, "/s", 4000, ">=",
               note="{:,} succeeded, {:,} other answers in {:.1f} s".format(r["succeeded"], r["other"], secs))
        figure(scen, "p50 request to result", r["p50_us"] / 1000.0, "ms", 10, "<=", fmt="{:.2f}")
        figure(scen, "p99 request to result", r["p99_us"] / 1000.0, "ms", 40, "<=", fmt="{:.2f}")
        figure(scen, "front door CPU per call", per(r["front_door_cpu_s"]), "µs", 100, "<=",
               note="relay {:.0f} µs per call".format(per(r["relay_cpu_s"]) or 0), fmt="{:.0f}")
        figure(scen, "answers not succeeded", r["other"], "calls", 0, "<=")
    # Issue 35: the front door's peak RSS under floods, beside its bound.
    for r in [r for r in raw if r["kind"] == "mcp_flood"]:
        label = {"stranger": "{} x {:.0f} KB, a made-up token", "waiting": "{} x {:.0f} KB waiting calls, one client"}
        scen = "mcp flood: " + label.get(r["flood"], "{} x {:.0f} KB").format(r["requests"], r["bytes"] / 1000)
        figure(scen, "front door peak RSS", r["peak_kb"] / 1024.0, "MiB", r["bound_kb"] / 1024.0, "<=",
               note="answers " + str(r["answers"]), fmt="{:.1f}")

    # ---------------------------------------------------------------- output
    def fmt_value(f):
        if f["value"] is None:
            return "-"
        if f["_shown"]:
            return f["_shown"]
        return f["_fmt"].format(f["value"]) + ("" if f["unit"] in ("x", "/s", "tx/s") else " " + f["unit"])

    def fmt_target(f):
        if f["_target_shown"]:
            return f["_target_shown"]
        if f["target_op"] is None:
            return ""
        t = f["_fmt"].format(f["target"]) if f["target"] >= 1 or f["unit"] == "x" else str(f["target"])
        return "{} {}{}".format("≥" if f["target_op"] == ">=" else "≤", t,
                                "" if f["unit"] in ("x", "/s", "tx/s") else " " + f["unit"])

    rows = [(f["scenario"], f["figure"], fmt_value(f), fmt_target(f), f["result"]) for f in figures]
    head = ("scenario", "figure", "value", "target", "result")
    widths = [max(len(str(x[i])) for x in rows + [head]) for i in range(5)]
    line = "  ".join("{:<%d}" % w for w in widths)
    print()
    print("outbox-relay bench — commit {} {}, PostgreSQL {}, libcurl {}, libuv {}, {} cores".format(
        meta.get("git_commit", "?")[:12],
        "(relay/ or migrations/ modified)" if meta.get("relay_or_migrations_modified") == "true" else "",
        meta.get("postgresql"), meta.get("libcurl"), meta.get("libuv"), meta.get("cores")))
    print(line.format(*head))
    print(line.format(*("-" * w for w in widths)))
    for r in rows:
        print(line.format(*r))
    print()
    for f in figures:
        detail = []
        if f["runs"]:
            detail.append("runs: " + ", ".join(str(x) for x in f["runs"]))
        if f["note"]:
            detail.append(f["note"])
        if detail:
            print("  {} / {}: {}".format(f["scenario"], f["figure"], "; ".join(detail)))
    for r in trickles:
        if r["negative"] or r["duplicate_arrivals"]:
            print("  trickle round {}: {} negative latencies, {} duplicate arrivals".format(
                r["round"], r["negative"], r["duplicate_arrivals"]))
    print("  load average before/after: {} / {}; elapsed {} s".format(
        meta.get("load_before"), end.get("load_after"), end.get("elapsed_s")))
    if end.get("broken"):
        print("  BROKEN: " + end["broken"])
    print()

    for f in figures:
        for k in ("_fmt", "_shown", "_target_shown"):
            f.pop(k, None)
    doc = {
        "versions": {k: meta.get(k) for k in (
            "git_commit", "relay_or_migrations_modified", "postgresql", "libcurl", "libuv",
            "libpq", "kernel", "cpu", "cores")},
        "settings": {k: meta.get(k) for k in (
            "pg_settings", "relay_options", "defaults_pg_settings", "defaults_pg_effective",
            "defaults_db_locale", "defaults_relay_options", "defaults_target", "batch_size", "max_in_flight", "runs", "other_runs",
            "drain_intents", "history_rows", "history_intents", "payload", "receiver", "trickle",
            "pgbench", "memory", "profiled", "only")},
        "headline_settings": {k: v for k, v in hmeta.items() if k != "kind"},
        "figures": figures,
        "raw": raw,
        "elapsed_s": end.get("elapsed_s"),
        "broken": [b for b in (end.get("broken") or "").split("; ") if b],
    }
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print("figures written to " + out_path)


if __name__ == "__main__":
    main()
