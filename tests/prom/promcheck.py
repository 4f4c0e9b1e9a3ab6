#!/usr/bin/env python3
"""tests/prom/promcheck.py — the dashboard's queries and the alerts' expressions,
taken from the files that ship (deploy/grafana/*.json, deploy/kubernetes/**.yaml)
and checked against a real Prometheus. Used by tests/integration/32_prometheus.sh.

  promcheck.py rules KUBE_DIR OUT
      Write the alerting rules of every PrometheusRule (spec.groups) and of every
      ConfigMap whose data holds a rule file (groups:) under KUBE_DIR to OUT, as a
      Prometheus rule file; print the alert names, one a line.
  promcheck.py coverage RULES TESTS_DIR
      Every alert in RULES has promtool unit tests in TESTS_DIR/*.test.yml with a
      case where it fires and a case where it does not.
  promcheck.py neuter RULES ALERT OUT
      Write RULES to OUT with ALERT's expression replaced by one that never fires.
  promcheck.py lint DASHBOARD
      The dashboard's shape: schema version, the DS_PROMETHEUS input, the target
      and database variables, every panel and query on ${DS_PROMETHEUS}, unique
      panel ids.
  promcheck.py eval PROM_URL DASHBOARD RULES [--positive TITLE]...
      Evaluate every dashboard query and every alert expression through
      GET PROM_URL/api/v1/query. Every one must succeed; every dashboard query
      must return a finite value; every relay metric selector in any of them
      (outbox_*, and up) must match series; the panels named by --positive must
      return a value above 0 in each of their queries. The variables'
      label_values() queries go through /api/v1/label/NAME/values.
  promcheck.py query PROM_URL EXPR
      Print the result of an instant query, one "labels<TAB>value" line per series.
  promcheck.py alerts PROM_URL
      Print the active alerts, one "alertname<TAB>state<TAB>labels" line each.
  promcheck.py rules-health PROM_URL RULES
      Every alert in RULES is loaded in Prometheus, has been evaluated, and is healthy.

Check results are printed one a line, "ok<TAB>description" or
"not ok<TAB>description<TAB>detail", for the scenario to turn into TAP. Exit
status 0 unless the command itself could not run.

Grafana's variables are replaced before a query is sent: $__rate_interval,
$__interval and $__range by 1m, $target and $database by .* (the variables'
"All"; .* also matches the series of a relay of one --db, which have no
database label). Any other variable is an error: the test would not know
what it stands for.
"""
import json
import math
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

import yaml

# Metrics that do not come from the relay, and that a test Prometheus scraping
# one relay therefore cannot have: the alerts that use them are evaluated, but
# their selectors are not required to match.
EXTERNAL_METRIC_PREFIXES = ("kube_",)  # kube-state-metrics (OutboxRelayDown, OutboxMcpDown)

SELECTOR = re.compile(r'(?<![\w"\-.])((?:outbox|kube)_[a-zA-Z0-9_]+|up)\b(\{[^}]*\})?')
GRAFANA_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_]\w*)(?::\w+)?\}|([A-Za-z_]\w*))")
NEVER_FIRES = "vector(0) > 1"


def report(ok, desc, detail=""):
    line = ("ok" if ok else "not ok") + "\t" + desc.replace("\t", " ").replace("\n", " ")
    if not ok and detail:
        line += "\t" + str(detail).replace("\t", " ").replace("\n", " ")
    print(line, flush=True)


# ---------------------------------------------------------------- rules
def rule_groups(kube_dir):
    """The rule groups of every PrometheusRule and rule-file ConfigMap, in file order."""
    groups = []
    for dirpath, dirnames, filenames in os.walk(kube_dir):
        dirnames.sort()
        for name in sorted(filenames):
            if not name.endswith((".yaml", ".yml")):
                continue
            path = os.path.join(dirpath, name)
            with open(path) as f:
                docs = list(yaml.safe_load_all(f))
            for doc in docs:
                if not isinstance(doc, dict):
                    continue
                if doc.get("kind") == "PrometheusRule":
                    groups.extend((doc.get("spec") or {}).get("groups") or [])
                elif doc.get("kind") == "ConfigMap":
                    for value in (doc.get("data") or {}).values():
                        try:
                            content = yaml.safe_load(value)
                        except yaml.YAMLError:
                            continue
                        if isinstance(content, dict) and isinstance(content.get("groups"), list):
                            groups.extend(content["groups"])
    return groups


def alerts_of(groups):
    return [r for g in groups for r in g.get("rules") or [] if "alert" in r]


def load_rule_file(path):
    with open(path) as f:
        return (yaml.safe_load(f) or {}).get("groups") or []


def cmd_rules(kube_dir, out):
    groups = rule_groups(kube_dir)
    alerts = alerts_of(groups)
    if not alerts:
        sys.exit("promcheck: no alerting rule under %s" % kube_dir)
    with open(out, "w") as f:
        yaml.safe_dump({"groups": groups}, f, sort_keys=False, width=1000)
    for rule in alerts:
        print(rule["alert"])


def cmd_coverage(rules, tests_dir):
    cases = {}  # alert -> [firing cases, quiet cases]
    for name in sorted(os.listdir(tests_dir)):
        if not name.endswith(".test.yml"):
            continue
        with open(os.path.join(tests_dir, name)) as f:
            doc = yaml.safe_load(f) or {}
        for test in doc.get("tests") or []:
            for case in test.get("alert_rule_test") or []:
                counts = cases.setdefault(case.get("alertname"), [0, 0])
                counts[0 if case.get("exp_alerts") else 1] += 1
    names = [r["alert"] for r in alerts_of(load_rule_file(rules))]
    for alert in names:
        firing, quiet = cases.get(alert, [0, 0])
        report(firing > 0 and quiet > 0,
               "%s has promtool unit tests: %d firing, %d not firing" % (alert, firing, quiet),
               "tests/prom/*.test.yml need a case where it fires and one where it does not")
    stray = sorted(set(cases) - set(names), key=str)
    report(not stray, "every alert named in tests/prom exists in the rules", "unknown: %s" % stray)


def cmd_neuter(rules, alert, out):
    groups = load_rule_file(rules)
    hits = [r for r in alerts_of(groups) if r["alert"] == alert]
    if not hits:
        sys.exit("promcheck: no alert %s in %s" % (alert, rules))
    for rule in hits:
        rule["expr"] = NEVER_FIRES
    with open(out, "w") as f:
        yaml.safe_dump({"groups": groups}, f, sort_keys=False, width=1000)


# ---------------------------------------------------------------- dashboard
def load_dashboard(path):
    with open(path) as f:
        return json.load(f)


def all_panels(dash):
    for panel in dash.get("panels") or []:
        yield panel
        for inner in panel.get("panels") or []:  # panels of a collapsed row
            yield inner


def dashboard_queries(dash):
    """(panel title, refId, expr) for every query of every panel."""
    for panel in all_panels(dash):
        for t in panel.get("targets") or []:
            if "expr" in t:
                yield panel.get("title", "?"), t.get("refId", "?"), t["expr"]


def variable_query(var):
    q = var.get("query")
    if isinstance(q, dict):
        q = q.get("query")
    return q or var.get("definition") or ""


def cmd_lint(path):
    dash = load_dashboard(path)
    report(isinstance(dash.get("schemaVersion"), int) and dash["schemaVersion"] >= 36,
           "dashboard schemaVersion %s (Grafana 9 or later)" % dash.get("schemaVersion"))
    inputs = dash.get("__inputs") or []
    report(any(i.get("name") == "DS_PROMETHEUS" and i.get("pluginId") == "prometheus" for i in inputs),
           "dashboard declares the DS_PROMETHEUS datasource input", json.dumps(inputs))
    variables = {v.get("name"): v for v in (dash.get("templating") or {}).get("list") or []}
    target = variables.get("target") or {}
    report(target.get("type") == "query"
           and re.fullmatch(r"label_values\(\s*outbox_\w+\s*,\s*target\s*\)", variable_query(target))
           and target.get("includeAll") and target.get("allValue") == ".*",
           "dashboard has a target variable from label_values(outbox_…, target) with All = .*",
           json.dumps(target))
    database = variables.get("database") or {}
    report(database.get("type") == "query"
           and re.fullmatch(r"label_values\(\s*outbox_\w+\s*,\s*database\s*\)", variable_query(database))
           and database.get("includeAll") and database.get("allValue") == ".*",
           "dashboard has a database variable from label_values(outbox_…, database) with All = .*",
           json.dumps(database))
    problems = []
    ids = [p.get("id") for p in all_panels(dash)]
    if len(ids) != len(set(ids)):
        problems.append("duplicate panel ids")
    for panel in all_panels(dash):
        if panel.get("type") == "row":
            continue
        where = panel.get("title", "?")
        if (panel.get("datasource") or {}).get("uid") != "${DS_PROMETHEUS}":
            problems.append("%s: panel datasource is not ${DS_PROMETHEUS}" % where)
        targets = panel.get("targets") or []
        if not targets:
            problems.append("%s: no query" % where)
        for t in targets:
            if (t.get("datasource") or {}).get("uid") != "${DS_PROMETHEUS}":
                problems.append("%s %s: query datasource is not ${DS_PROMETHEUS}" % (where, t.get("refId")))
            if not t.get("expr", "").strip():
                problems.append("%s %s: empty expr" % (where, t.get("refId")))
        refs = [t.get("refId") for t in targets]
        if len(refs) != len(set(refs)):
            problems.append("%s: duplicate refIds" % where)
        grid = panel.get("gridPos") or {}
        if not all(isinstance(grid.get(k), int) for k in ("x", "y", "w", "h")) or grid["x"] + grid["w"] > 24:
            problems.append("%s: gridPos %r" % (where, grid))
    report(not problems, "every panel and query uses ${DS_PROMETHEUS}, panel ids and refIds unique, "
           "gridPos within 24 columns", "; ".join(problems))


def concrete(expr):
    """The query as Prometheus gets it once Grafana has replaced its variables."""
    unknown = []

    def replace(m):
        name = m.group(1) or m.group(2)
        if name in ("__rate_interval", "__interval", "__range"):
            return "1m"
        if name in ("target", "database"):
            return ".*"
        unknown.append(name)
        return m.group(0)

    text = GRAFANA_VARIABLE.sub(replace, expr)
    return text, unknown


# ---------------------------------------------------------------- Prometheus HTTP API
def api_get(base, path, params):
    url = base.rstrip("/") + path + ("?" + urllib.parse.urlencode(params, doseq=True) if params else "")
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:  # 400 bad_data, 422 execution: the body says why
        try:
            return json.load(e)
        except ValueError:
            return {"status": "error", "error": "HTTP %d" % e.code}
    except (urllib.error.URLError, OSError, ValueError) as e:
        return {"status": "error", "error": "no answer: %s" % e}


def instant(base, expr, at):
    """(error or None, [(labels, value)]) of an instant query."""
    doc = api_get(base, "/api/v1/query", {"query": expr, "time": at})
    if doc.get("status") != "success":
        return "%s: %s" % (doc.get("errorType", "error"), doc.get("error", "?")), []
    if doc.get("warnings"):
        return "warnings: %s" % doc["warnings"], []
    data = doc.get("data") or {}
    kind, result = data.get("resultType"), data.get("result")
    if kind == "vector":
        return None, [(s.get("metric") or {}, float(s["value"][1])) for s in result]
    if kind == "scalar":
        return None, [({}, float(result[1]))]
    if kind == "matrix":
        return None, [(s.get("metric") or {}, float(s["values"][-1][1])) for s in result if s.get("values")]
    return "result type %s" % kind, []


def server_time(base):
    doc = api_get(base, "/api/v1/query", {"query": "time()"})
    if doc.get("status") != "success":
        sys.exit("promcheck: Prometheus at %s does not answer: %s" % (base, doc.get("error")))
    return doc["data"]["result"][0]


def labels_text(metric):
    return ",".join('%s="%s"' % (k, metric[k]) for k in sorted(metric))


def cmd_eval(base, dashboard, rules, positive):
    dash = load_dashboard(dashboard)
    at = server_time(base)  # one evaluation time for every query
    selector_cache = {}

    def empty_selectors(text):
        empty = []
        for m in SELECTOR.finditer(text):
            sel = m.group(1) + (m.group(2) or "")
            if m.group(1).startswith(EXTERNAL_METRIC_PREFIXES):
                continue
            if sel not in selector_cache:
                err, series = instant(base, sel, at)
                selector_cache[sel] = err or ("" if series else "no series")
            if selector_cache[sel]:
                empty.append("%s (%s)" % (sel, selector_cache[sel]))
        return empty

    queries = list(dashboard_queries(dash))
    titles = {title for title, _, _ in queries}
    for title in positive:
        report(title in titles, "dashboard has the panel %r" % title, "panel titles: %s" % sorted(titles))
    report(len(queries) > 0, "dashboard has %d queries" % len(queries))
    for title, ref, expr in queries:
        desc = "dashboard %r %s: %s" % (title, ref, " ".join(expr.split()))
        text, unknown = concrete(expr)
        if unknown:
            report(False, desc, "unknown Grafana variables: %s" % unknown)
            continue
        err, series = instant(base, text, at)
        finite = [v for _, v in series if math.isfinite(v)]
        problems = []
        if err:
            problems.append(err)
        elif not series:
            problems.append("no data")
        elif not finite:
            problems.append("no finite value: %s" % [v for _, v in series])
        elif title in positive and not any(v > 0 for v in finite):
            problems.append("must be above 0 while the relay delivers: %s" % finite)
        problems += ["selector matches nothing: %s" % s for s in empty_selectors(text)]
        report(not problems, desc, "; ".join(problems) + " | sent: " + text)

    for var in (dash.get("templating") or {}).get("list") or []:
        if var.get("type") != "query":
            continue
        q = variable_query(var)
        m = re.fullmatch(r"label_values\(\s*([^,]+?)\s*,\s*(\w+)\s*\)", q)
        if not m:
            report(False, "dashboard variable %s: %s" % (var.get("name"), q), "not label_values(selector, label)")
            continue
        selector, label = m.groups()
        doc = api_get(base, "/api/v1/label/%s/values" % label, {"match[]": selector})
        values = doc.get("data") or []
        report(doc.get("status") == "success" and len(values) > 0,
               "dashboard variable %s: %s = %s" % (var.get("name"), q, values), doc.get("error", "no values"))

    for rule in alerts_of(load_rule_file(rules)):
        expr = str(rule["expr"])
        desc = "alert %s: %s" % (rule["alert"], " ".join(expr.split()))
        err, series = instant(base, expr, at)
        problems = [err] if err else []
        problems += ["selector matches nothing: %s" % s for s in empty_selectors(expr)]
        external = sorted({m.group(1) for m in SELECTOR.finditer(expr)
                           if m.group(1).startswith(EXTERNAL_METRIC_PREFIXES)})
        if external:
            desc += " (not from the relay, not required to match: %s)" % ", ".join(external)
        report(not problems, desc, "; ".join(problems))


def cmd_query(base, expr):
    err, series = instant(base, expr, server_time(base))
    if err:
        sys.exit("promcheck: %s" % err)
    for metric, value in sorted(series, key=lambda s: labels_text(s[0])):
        print("%s\t%s" % (labels_text(metric), repr(value)))


def cmd_alerts(base):
    doc = api_get(base, "/api/v1/alerts", {})
    if doc.get("status") != "success":
        sys.exit("promcheck: %s" % doc.get("error"))
    for a in sorted(doc["data"]["alerts"], key=lambda a: labels_text(a["labels"])):
        labels = {k: v for k, v in a["labels"].items() if k != "alertname"}
        print("%s\t%s\t%s" % (a["labels"].get("alertname"), a.get("state"), labels_text(labels)))


def cmd_rules_health(base, rules):
    doc = api_get(base, "/api/v1/rules", {"type": "alert"})
    if doc.get("status") != "success":
        sys.exit("promcheck: %s" % doc.get("error"))
    loaded = {r["name"]: r for g in doc["data"]["groups"] for r in g["rules"]}
    for rule in alerts_of(load_rule_file(rules)):
        got = loaded.get(rule["alert"])
        if got is None:
            report(False, "Prometheus loaded and evaluates %s" % rule["alert"], "not loaded")
            continue
        evaluated = not str(got.get("lastEvaluation", "")).startswith("0001-")
        report(got.get("health") == "ok" and evaluated and not got.get("lastError"),
               "Prometheus evaluates %s: health %s" % (rule["alert"], got.get("health")),
               "lastEvaluation %s, lastError %r" % (got.get("lastEvaluation"), got.get("lastError")))


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd, args = argv[1], argv[2:]
    positive = []
    while "--positive" in args:
        i = args.index("--positive")
        positive.append(args[i + 1])
        del args[i:i + 2]
    commands = {
        "rules": (cmd_rules, 2), "coverage": (cmd_coverage, 2), "neuter": (cmd_neuter, 3),
        "lint": (cmd_lint, 1), "query": (cmd_query, 2), "alerts": (cmd_alerts, 1),
        "rules-health": (cmd_rules_health, 2),
    }
    if cmd == "eval" and len(args) == 3:
        cmd_eval(*args, positive)
    elif cmd in commands and len(args) == commands[cmd][1]:
        commands[cmd][0](*args)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
