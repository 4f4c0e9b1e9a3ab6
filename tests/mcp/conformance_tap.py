#!/usr/bin/env python3
"""One line per conformance scenario, judged against an expected-failures
file (tests/integration/44_mcp_conformance.sh runs the suite, then this).

    conformance_tap.py LABEL RESULTS_DIR EXPECTED_YAML

RESULTS_DIR is the suite's -o folder: one server-<scenario>-<time>/checks.json
per scenario. A check fails when its status is FAILURE or WARNING (the suite
counts a warning as failing against a baseline too). EXPECTED_YAML is the
suite's baseline format: `server:` entries `scenario` (the whole scenario may
fail) or `scenario:check`.

Prints "ok<TAB>desc" or "not ok<TAB>desc<TAB>detail" per scenario (an
unexpected failing check, or an expected failure that now passes, is "not
ok"), and last "summary<TAB>LABEL<TAB>counts".
"""
import json
import os
import re
import sys

import yaml

FAILING = ("FAILURE", "WARNING")
DIR_NAME = re.compile(r"^server-(.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d+Z$")


def main():
    label, results, expected_file = sys.argv[1:4]
    with open(expected_file) as f:
        entries = (yaml.safe_load(f) or {}).get("server") or []
    whole = {e for e in entries if ":" not in e}
    per_check = {}
    for e in entries:
        if ":" in e:
            scenario, check = e.split(":", 1)
            per_check.setdefault(scenario, set()).add(check)

    counts = {"passed": 0, "failed": 0, "expected": 0, "checks_ok": 0, "checks_failed": 0, "checks_expected": 0}
    seen = set()
    for d in sorted(os.listdir(results)):
        m = DIR_NAME.match(d)
        if not m:
            continue
        scenario = m.group(1)
        seen.add(scenario)
        try:
            with open(os.path.join(results, d, "checks.json")) as f:
                checks = json.load(f)
        except (OSError, ValueError) as err:
            counts["failed"] += 1
            print("not ok\t%s: %s\tno checks.json: %s" % (label, scenario, err))
            continue
        failing = [c for c in checks if c.get("status") in FAILING]
        failing_ids = {c.get("id") for c in failing}
        ok_n = sum(1 for c in checks if c.get("status") == "SUCCESS")
        counts["checks_ok"] += ok_n
        if scenario in whole:
            counts["checks_expected"] += len(failing)
            if failing:
                counts["expected"] += 1
                print("ok\t%s: %s fails as expected (not offered)" % (label, scenario))
            else:
                counts["failed"] += 1
                print("not ok\t%s: %s is listed as an expected failure but passes\tremove it from %s"
                      % (label, scenario, os.path.basename(expected_file)))
            continue
        listed = per_check.get(scenario, set())
        unexpected = [c for c in failing if c.get("id") not in listed]
        stale = sorted(listed - failing_ids)
        counts["checks_expected"] += len(failing) - len(unexpected)
        counts["checks_failed"] += len(unexpected)
        if unexpected or stale:
            counts["failed"] += 1
            detail = "; ".join("%s %s: %s" % (c.get("id"), c.get("status"), c.get("errorMessage") or
                                              json.dumps(c.get("details"))[:200]) for c in unexpected)
            if stale:
                detail += ("; " if detail else "") + "listed as expected failures but passing: " + ", ".join(stale)
            print("not ok\t%s: %s (%d checks)\t%s" % (label, scenario, len(checks), detail))
        elif failing:
            counts["expected"] += 1
            print("ok\t%s: %s passes but for %d expected check(s): %s"
                  % (label, scenario, len(failing), ", ".join(sorted(failing_ids))))
        else:
            counts["passed"] += 1
            print("ok\t%s: %s (%d checks)" % (label, scenario, len(checks)))
    not_run = sorted((whole | set(per_check)) - seen)
    print("summary\t%s\t%d scenarios: %d passed, %d failed, %d expected failures; checks: %d passed, %d failed, "
          "%d expected failures%s"
          % (label, len(seen), counts["passed"], counts["failed"], counts["expected"], counts["checks_ok"],
             counts["checks_failed"], counts["checks_expected"],
             ("; listed but not run: " + ", ".join(not_run)) if not_run else ""))


if __name__ == "__main__":
    main()
