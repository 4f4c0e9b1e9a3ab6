#!/usr/bin/env bash
# deploy/ checked offline, no database and no cluster: the kustomize renders of
# deploy/kubernetes and deploy/kubernetes/overlays/example, the Dockerfile, the
# runbook anchors, and a scan for secret values. TAP on stdout; exits non-zero
# on any failure. Needs kubectl (its built-in kustomize, v2 or later; the
# render checks are skipped, and say so, only when kubectl is absent) and
# python3 with PyYAML (Debian: python3-yaml).
#
# What this does not do: run the relay. Its real SIGTERM drain is tested in
# tests/integration/05_sigterm.sh, and the endpoints the probes use
# (/healthz, /readyz on the admin port) by the admin port's own scenarios.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

N=0
FAILED=0
pass() { N=$((N + 1)); echo "ok $N - $1"; }
fail() {
    N=$((N + 1)); FAILED=$((FAILED + 1)); echo "not ok $N - $1"
    [ -n "${2:-}" ] && sed -e 's/^/#   /' <<<"$2"
    return 0
}
skip() { N=$((N + 1)); echo "ok $N # SKIP $1"; }

TMP=$(mktemp -d /tmp/outbox-deploy-check.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

PY=""
for candidate in python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import yaml' 2>/dev/null; then
        PY=$candidate
        break
    fi
done

# ---------------------------------------------------------------- render
KUBECTL=${KUBECTL:-kubectl}
RENDERS=()
if ! command -v "$KUBECTL" >/dev/null 2>&1; then
    skip "kubectl not installed: kubectl kustomize deploy/kubernetes not rendered"
    skip "kubectl not installed: kubectl kustomize deploy/kubernetes/overlays/example not rendered"
else
    for dir in deploy/kubernetes deploy/kubernetes/overlays/example; do
        out=$TMP/$(tr '/' '_' <<<"$dir").yaml
        # kustomize v5 warns about the v2-compatible field names; only errors matter.
        if timeout 60 "$KUBECTL" kustomize "$dir" >"$out" 2>"$out.err" && [ -s "$out" ]; then
            pass "kubectl kustomize $dir"
            RENDERS+=("$dir=$out")
        else
            fail "kubectl kustomize $dir" "$(grep -v '^# Warning' "$out.err" | tail -n 5)"
        fi
    done
    # The base serving several databases from Secrets (--databases): the file
    # mounted from a Secret, passwords from another, no DATABASE_URL left but
    # the MCP front door's (it serves one database).
    out=$TMP/databases.yaml
    if timeout 60 "$KUBECTL" kustomize deploy/kubernetes/overlays/databases >"$out" 2>"$out.err" &&
        grep -q 'name: OUTBOX_RELAY_DATABASES' "$out" && [ "$(grep -c 'name: DATABASE_URL' "$out")" = 1 ] &&
        grep -q 'secretName: outbox-relay-databases' "$out" &&
        grep -q 'secretName: outbox-relay-migrate-databases' "$out" &&
        grep -q -- '- --databases' "$out" && grep -q 'name: outbox-relay-database-passwords' "$out"; then
        pass "kubectl kustomize deploy/kubernetes/overlays/databases: the databases file and passwords from Secrets"
    else
        fail "kubectl kustomize deploy/kubernetes/overlays/databases" "$(grep -v '^# Warning' "$out.err" | tail -n 5)"
    fi
fi

# ---------------------------------------------------------------- checks
if [ -z "$PY" ]; then
    fail "python3 with PyYAML (Debian: python3-yaml) is needed to check the manifests"
    echo "1..$N"
    exit 1
fi

# The checks print "PASS<TAB>description", "FAIL<TAB>description<TAB>detail"
# or "SKIP<TAB>reason"; numbering happens here.
RELAY_BIN_FOR_LIBS=$ROOT/build/outbox-relay
"$PY" - "$ROOT" "$RELAY_BIN_FOR_LIBS" "${RENDERS[@]}" >"$TMP/checks.out" 2>"$TMP/checks.err" <<'PYTHON'
import fnmatch
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import yaml

root, relay_bin = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(root, "tests", "lib"))
from kubelet_env import kubelet_env  # noqa: E402  the kubelet's expansion of env
renders = dict(arg.split("=", 1) for arg in sys.argv[3:])
os.chdir(root)


def check(desc, problems):
    """One TAP line: problems is a list of strings, empty when the check passed."""
    desc = desc.replace("\t", " ").replace("\n", " ")
    if not problems:
        print("PASS\t%s" % desc)
        return
    shown = problems[:10] + (["… and %d more" % (len(problems) - 10)] if len(problems) > 10 else [])
    detail = " | ".join(x.replace("\t", " ").replace("\n", " ").replace("|", "/") for x in shown)
    print("FAIL\t%s\t%s" % (desc, detail))


def skip(reason):
    print("SKIP\t%s" % reason)


KNOWN_METRICS = {
    "outbox_intents", "outbox_oldest_pending_age_seconds", "outbox_attempts_total",
    "outbox_db_reconnects_total", "outbox_ready", "outbox_in_flight", "outbox_deliveries_total",
    "outbox_target_circuit_open", "outbox_target_concurrency_limit", "outbox_target_paused",
    # the MCP front door's (relay/mcp/mcp_server.c, write_metrics)
    "outbox_mcp_calls_total", "outbox_mcp_refusals_total", "outbox_mcp_call_seconds",
    "outbox_mcp_waiting_calls", "outbox_mcp_db_connections_ready",
}
MCP_METRICS = sorted(m for m in KNOWN_METRICS if m.startswith("outbox_mcp_"))
RUNBOOK = "deploy/RUNBOOK.md"
# Environment variables that must come from a Secret, never from a value.
SECRET_ENV = re.compile(r"(PASS|SECRET|TOKEN|API_?KEY|PRIVATE|DATABASE_URL|CONNINFO|^OUTBOX_RELAY_DB$)", re.I)
SECURITY = "runAsNonRoot, non-zero runAsUser, allowPrivilegeEscalation false, drop ALL, " \
           "readOnlyRootFilesystem, seccomp RuntimeDefault"

# ------------------------------------------------------------ kustomization images
def kustomization(path):
    with open(os.path.join(path, "kustomization.yaml")) as f:
        return yaml.safe_load(f) or {}


def image_entries(path, seen=None):
    """The images: entries that decide a render's images: the kustomization's own,
    else those of the kustomizations it builds on (an overlay that sets images
    must be the one that names the image, not its base)."""
    seen = seen if seen is not None else set()
    path = os.path.normpath(path)
    if path in seen:
        return []
    seen.add(path)
    k = kustomization(path)
    if k.get("images"):
        return list(k["images"])
    entries = []
    for ref in (k.get("bases") or []) + (k.get("resources") or []):
        sub = os.path.normpath(os.path.join(path, ref))
        if os.path.isdir(sub):
            entries += image_entries(sub, seen)
    return entries


def allowed_images(entries):
    allowed = set()
    for e in entries:
        name = e.get("newName") or e["name"]
        if e.get("digest"):
            allowed.add("%s@%s" % (name, e["digest"]))
        if e.get("newTag") is not None:
            allowed.add("%s:%s" % (name, e["newTag"]))
    return allowed


# ------------------------------------------------------------ runbook anchors
def runbook_anchors():
    anchors = set()
    with open(RUNBOOK) as f:
        text = f.read()
    anchors.update(re.findall(r'<a\s+(?:id|name)="([^"]+)"', text))
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


# ------------------------------------------------------------ rendered objects
def pod_specs(obj):
    """(label, pod spec, pod labels) of every pod template in an object."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    name = "%s/%s" % (kind, obj["metadata"]["name"])
    if kind == "Pod":
        return [(name, spec, obj["metadata"].get("labels") or {})]
    if kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    template = spec.get("template")
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob") and template:
        return [(name, template.get("spec") or {}, (template.get("metadata") or {}).get("labels") or {})]
    return []


def containers(pod):
    return [("container", c) for c in pod.get("containers") or []] + \
           [("initContainer", c) for c in pod.get("initContainers") or []]


def effective(pod, c, key):
    csc, psc = c.get("securityContext") or {}, pod.get("securityContext") or {}
    return csc[key] if key in csc else psc.get(key)


def security_problems(label, pod, c):
    p = []
    who = "%s %s" % (label, c["name"])
    if effective(pod, c, "runAsNonRoot") is not True:
        p.append(who + ": runAsNonRoot is not true")
    uid = effective(pod, c, "runAsUser")
    if not isinstance(uid, int) or uid == 0:
        p.append(who + ": runAsUser must be a non-zero numeric uid, got %r" % (uid,))
    csc = c.get("securityContext") or {}
    if csc.get("allowPrivilegeEscalation") is not False:
        p.append(who + ": allowPrivilegeEscalation is not false")
    if csc.get("privileged"):
        p.append(who + ": privileged")
    if "ALL" not in ((csc.get("capabilities") or {}).get("drop") or []):
        p.append(who + ": capabilities.drop lacks ALL")
    if (csc.get("capabilities") or {}).get("add"):
        p.append(who + ": adds capabilities")
    if csc.get("readOnlyRootFilesystem") is not True:
        p.append(who + ": readOnlyRootFilesystem is not true")
    seccomp = effective(pod, c, "seccompProfile") or {}
    if seccomp.get("type") != "RuntimeDefault":
        p.append(who + ": seccompProfile is not RuntimeDefault")
    return p


def env_value(objs, pod, c, name):
    """The value a container sees for NAME: env wins over envFrom (last envFrom wins)."""
    for e in c.get("env") or []:
        if e["name"] == name:
            return e.get("value")
    value = None
    for src in c.get("envFrom") or []:
        ref = src.get("configMapRef")
        if ref:
            for o in objs:
                if o["kind"] == "ConfigMap" and o["metadata"]["name"] == ref["name"]:
                    value = (o.get("data") or {}).get(name, value)
    return value


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def selector_terms(text):
    """A kubectl -l label selector as (key, op, values) terms."""
    terms, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        terms.append(cur.strip())
    out = []
    for t in terms:
        m = re.fullmatch(r"(\S+)\s+(in|notin)\s+\(([^)]*)\)", t)
        if m:
            out.append((m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}))
            continue
        m = re.fullmatch(r"([^=!\s]+)\s*(==|=|!=)\s*(\S*)", t)
        if m:
            out.append((m.group(1), {"==": "=", "=": "=", "!=": "!="}[m.group(2)], {m.group(3)}))
        elif t.startswith("!"):
            out.append((t[1:], "!exists", set()))
        else:
            out.append((t, "exists", set()))
    return out


def label_selects(terms, labels):
    """Kubernetes' semantics: != and notin also match objects without the key."""
    for key, op, values in terms:
        has, v = key in labels, labels.get(key)
        if op == "=" and not (has and v in values):
            return False
        if op == "in" and not (has and v in values):
            return False
        if op in ("!=", "notin") and has and v in values:
            return False
        if op == "exists" and not has:
            return False
        if op == "!exists" and has:
            return False
    return True


def readme_section(text, heading):
    m = re.search(r"^## %s\n(.*?)(?=^## )" % re.escape(heading), text, re.M | re.S)
    return m.group(1) if m else ""


with open("deploy/README.md") as f:
    README = f.read()
# Every `kubectl apply -k DIR -l SELECTOR` of deploy/README.md, and whether it is
# a migrate step (the Job is waited for right after it) or another.
APPLY_STEPS = []
_lines = README.splitlines()
for _i, _line in enumerate(_lines):
    _m = re.search(r"kubectl apply -k \S+ -l '([^']*)'|kubectl apply -k \S+ -l (\S+)", _line)
    if _m:
        _after = " ".join(_lines[_i + 1:_i + 3])
        APPLY_STEPS.append((_i + 1, _m.group(1) or _m.group(2),
                            "wait --for=condition=complete" in _after and "job/" in _after))
# The Secrets the documented steps create ("Deploy", step 2), and the base's
# default names the README gives.
SECRETS_CREATED = set(re.findall(r"create secret generic\s+(?:\\\s*\n\s*)?([a-z0-9][a-z0-9.-]*)",
                                 readme_section(README, "Deploy")))


def check_render(tag, path, kdir):
    with open(path) as f:
        objs = [o for o in yaml.safe_load_all(f) if o]
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    names = lambda kind: {o["metadata"]["name"] for o in by_kind.get(kind, [])}

    wanted = ["Deployment", "Job", "Service", "PodDisruptionBudget", "ServiceAccount",
              "PrometheusRule", "ConfigMap", "NetworkPolicy", "ServiceMonitor"]
    check("%s: renders %s" % (tag, ", ".join(wanted)),
          ["no %s" % k for k in wanted if k not in by_kind])

    pods = [p for o in objs for p in pod_specs(o)]
    deployments = by_kind.get("Deployment", [])
    relay_pod = None
    relay = None
    mcp_pod = None
    mcp = None
    for d in deployments:
        spec = d["spec"]["template"]["spec"]
        for c in spec.get("containers") or []:
            if (c.get("args") or [None])[0] == "run" or c["name"] == "relay":
                relay_pod, relay = spec, c
            if (c.get("args") or [None])[0] == "mcp":
                mcp_pod, mcp = spec, c

    # Security context of every container and initContainer.
    problems = []
    for label, pod, _ in pods:
        for _, c in containers(pod):
            problems += security_problems(label, pod, c)
        if pod.get("automountServiceAccountToken") is not False:
            problems.append(label + ": automountServiceAccountToken is not false")
        for host in ("hostNetwork", "hostPID", "hostIPC"):
            if pod.get(host):
                problems.append("%s: %s" % (label, host))
    check("%s: every container and initContainer: %s; no service account token" % (tag, SECURITY),
          problems if pods else ["no pod templates rendered"])

    # Probes on the named admin port.
    p = []
    if relay is None:
        p.append("no relay container (args [run]) in a Deployment")
    else:
        ports = {pt.get("name"): pt.get("containerPort") for pt in relay.get("ports") or []}
        if ports.get("admin") != 9464:
            p.append("no container port named admin = 9464 (got %r)" % ports)
        for probe, path_ in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = (relay.get(probe) or {}).get("httpGet") or {}
            if get.get("path") != path_ or get.get("port") != "admin":
                p.append("%s is not httpGet %s on port admin (got %r)" % (probe, path_, get))
        listen = env_value(objs, relay_pod, relay, "OUTBOX_RELAY_ADMIN_LISTEN")
        if listen != "0.0.0.0:9464":
            p.append("OUTBOX_RELAY_ADMIN_LISTEN is %r, not 0.0.0.0:9464" % (listen,))
        for o in by_kind.get("ConfigMap", []):
            v = (o.get("data") or {}).get("OUTBOX_RELAY_ADMIN_LISTEN")
            if v is not None and v != listen:
                p.append("ConfigMap %s says OUTBOX_RELAY_ADMIN_LISTEN=%s, the container %s"
                         % (o["metadata"]["name"], v, listen))
    check("%s: relay liveness /healthz and readiness /readyz on the named admin port 9464, "
          "listening on 0.0.0.0:9464" % tag, p)

    # Grace period versus the relay's drain.
    p = []
    if relay is not None:
        grace = env_value(objs, relay_pod, relay, "OUTBOX_RELAY_GRACE_MS")
        tgps = relay_pod.get("terminationGracePeriodSeconds")
        if grace is None or not str(grace).isdigit():
            p.append("OUTBOX_RELAY_GRACE_MS not set from the ConfigMap (got %r)" % (grace,))
        elif not isinstance(tgps, int) or tgps * 1000 <= int(grace):
            p.append("terminationGracePeriodSeconds %r * 1000 <= OUTBOX_RELAY_GRACE_MS %s" % (tgps, grace))
    check("%s: terminationGracePeriodSeconds*1000 > OUTBOX_RELAY_GRACE_MS of the ConfigMap" % tag,
          p or ([] if relay is not None else ["no relay container"]))

    # Resources.
    p = []
    for label, pod, _ in pods:
        for _, c in containers(pod):
            r = c.get("resources") or {}
            if not (r.get("limits") or {}).get("memory"):
                p.append("%s %s: no memory limit" % (label, c["name"]))
            if not (r.get("requests") or {}).get("cpu") or not (r.get("requests") or {}).get("memory"):
                p.append("%s %s: no cpu/memory requests" % (label, c["name"]))
    if relay is not None:
        r = relay.get("resources") or {}
        if (r.get("requests") or {}).get("cpu") != "50m" or (r.get("requests") or {}).get("memory") != "176Mi" \
                or (r.get("limits") or {}).get("memory") != "224Mi":
            p.append("relay resources are not requests 50m/176Mi, limits 224Mi: %r" % r)
        # The memory bound of docs/operations.md ("Memory") for the options the container
        # gets, over TLS: 12 MiB + in_flight x (response cap + 36 KiB + 48 KiB)
        # + 3 x 4 MiB. The request covers it, the limit adds 25 % (deployment.yaml).
        in_flight = env_value(objs, relay_pod, relay, "OUTBOX_RELAY_MAX_IN_FLIGHT") or "1024"
        cap = env_value(objs, relay_pod, relay, "OUTBOX_RELAY_MAX_RESPONSE_BYTES") or "65536"
        if str(in_flight).isdigit() and str(cap).isdigit():
            bound = 12 * 2**20 + int(in_flight) * (int(cap) + (36 + 48) * 1024) + 3 * 4 * 2**20
            for kind, want in (("requests", bound), ("limits", bound * 1.25)):
                m = re.fullmatch(r"([0-9]+)(Mi|Gi)", str((r.get(kind) or {}).get("memory")))
                got = int(m.group(1)) * (2**20 if m.group(2) == "Mi" else 2**30) if m else 0
                if got < want:
                    p.append("relay %s.memory %r < %.1f MiB (bound for max-in-flight %s, max-response-bytes %s%s)"
                             % (kind, (r.get(kind) or {}).get("memory"), want / 2**20, in_flight, cap,
                                " + 25 %" if kind == "limits" else ""))
        else:
            p.append("OUTBOX_RELAY_MAX_IN_FLIGHT %r / OUTBOX_RELAY_MAX_RESPONSE_BYTES %r are not numbers"
                     % (in_flight, cap))
    check("%s: resources: requests and memory limits on every container (relay 50m/176Mi, 224Mi; "
          "request >= the memory bound of docs/operations.md for its options, limit >= bound + 25 %%)" % tag, p)

    # The front door's bound (deploy/README.md, "The front door's memory"):
    # 12 MiB + 1.25 x mcp-memory-bytes + 80 KiB x mcp-max-connections; the
    # limit covers it with 10 % to spare.
    p = []
    if mcp is not None:
        r = mcp.get("resources") or {}
        mem = env_value(objs, mcp_pod, mcp, "OUTBOX_RELAY_MCP_MEMORY_BYTES") or str(20 * 2**20)
        conns = env_value(objs, mcp_pod, mcp, "OUTBOX_RELAY_MCP_MAX_CONNECTIONS") or "256"
        if str(mem).isdigit() and str(conns).isdigit():
            bound = 12 * 2**20 + 1.25 * int(mem) + 80 * 1024 * int(conns)
            m = re.fullmatch(r"([0-9]+)(Mi|Gi)", str((r.get("limits") or {}).get("memory")))
            got = int(m.group(1)) * (2**20 if m.group(2) == "Mi" else 2**30) if m else 0
            if got < bound * 1.10:
                p.append("front door limits.memory %r < %.1f MiB (its bound + 10 %% for memory-bytes %s, "
                         "max-connections %s)" % ((r.get("limits") or {}).get("memory"),
                                                   bound * 1.10 / 2**20, mem, conns))
        else:
            p.append("OUTBOX_RELAY_MCP_MEMORY_BYTES %r / OUTBOX_RELAY_MCP_MAX_CONNECTIONS %r are not numbers"
                     % (mem, conns))
    check("%s: the front door's memory limit >= its bound for its options + 10 %%" % tag,
          p if mcp is not None else ["no front door container"])

    # References: ConfigMaps and ServiceAccounts exist; Secrets are referenced, never rendered.
    p = []
    inline = []
    secret_refs = set()
    for label, pod, _ in pods:
        sa = pod.get("serviceAccountName")
        if sa and sa not in names("ServiceAccount"):
            p.append("%s: serviceAccountName %s not in the render" % (label, sa))
        for _, c in containers(pod):
            for src in c.get("envFrom") or []:
                if "configMapRef" in src and src["configMapRef"]["name"] not in names("ConfigMap"):
                    p.append("%s: configMapRef %s not in the render" % (label, src["configMapRef"]["name"]))
                if "secretRef" in src:
                    secret_refs.add(src["secretRef"]["name"])
            for e in c.get("env") or []:
                vf = e.get("valueFrom") or {}
                if "configMapKeyRef" in vf:
                    ref = vf["configMapKeyRef"]
                    cms = [o for o in by_kind.get("ConfigMap", []) if o["metadata"]["name"] == ref["name"]]
                    if not cms or ref["key"] not in (cms[0].get("data") or {}):
                        p.append("%s: configMapKeyRef %s/%s not in the render" % (label, ref["name"], ref["key"]))
                if "secretKeyRef" in vf:
                    secret_refs.add(vf["secretKeyRef"]["name"])
                if "value" in e and SECRET_ENV.search(e["name"]):
                    inline.append("%s: %s has an inline value" % (label, e["name"]))
        for v in pod.get("volumes") or []:
            if "configMap" in v and v["configMap"]["name"] not in names("ConfigMap"):
                p.append("%s: volume configMap %s not in the render" % (label, v["configMap"]["name"]))
            if "secret" in v:
                secret_refs.add(v["secret"]["secretName"])
    check("%s: every configMapRef/configMapKeyRef/serviceAccountName names an object in the render" % tag, p)

    p = inline
    for o in by_kind.get("Secret", []):
        p.append("Secret %s is in the render%s" % (o["metadata"]["name"],
                 " with data" if o.get("data") or o.get("stringData") else ""))
    if not secret_refs:
        p.append("no secretRef/secretKeyRef at all")
    if relay is not None:
        db = [e for e in relay.get("env") or [] if e["name"] == "DATABASE_URL"]
        if not db or "secretKeyRef" not in (db[0].get("valueFrom") or {}):
            p.append("the relay's DATABASE_URL is not a secretKeyRef")
        if not any("secretRef" in s for s in relay.get("envFrom") or []):
            p.append("the relay has no envFrom secretRef for signing secrets")
    for job in by_kind.get("Job", []):
        c = job["spec"]["template"]["spec"]["containers"][0]
        db = [e for e in c.get("env") or [] if e["name"] == "DATABASE_URL"]
        if not db or "secretKeyRef" not in (db[0].get("valueFrom") or {}):
            p.append("Job %s: DATABASE_URL is not a secretKeyRef" % job["metadata"]["name"])
    check("%s: Secrets referenced by name only (%s), none rendered, no inline secret values"
          % (tag, ", ".join(sorted(secret_refs)) or "none"), p)

    # Every Secret a pod needs is created by a documented step (issue 35,
    # item 15): the overlay's by deploy/README.md's "Deploy" step 2, the base's
    # named there as the base's defaults, else the pod never starts
    # (CreateContainerConfigError).
    p = []
    for name in sorted(secret_refs):
        if tag == "base":
            if "`%s`" % name not in readme_section(README, "Deploy"):
                p.append("Secret %s: deploy/README.md's Deploy section does not name it" % name)
        elif name not in SECRETS_CREATED:
            p.append("Secret %s is created by no step of deploy/README.md's Deploy section "
                     "(it creates %s)" % (name, ", ".join(sorted(SECRETS_CREATED)) or "none"))
    check("%s: every Secret the pods reference is created by a documented step (%s)"
          % (tag, ", ".join(sorted(secret_refs))), p)

    # Images come from the kustomization's images: entries.
    allowed = allowed_images(image_entries(kdir))
    p = []
    for label, pod, _ in pods:
        for _, c in containers(pod):
            img = c.get("image", "")
            if img not in allowed:
                p.append("%s %s: image %s is not set by a kustomization images: entry (%s)"
                         % (label, c["name"], img, ", ".join(sorted(allowed))))
            if img.endswith(":latest") or ("@" not in img and ":" not in img.rsplit("/", 1)[-1]):
                p.append("%s %s: image %s has no tag or digest, or is latest" % (label, c["name"], img))
    check("%s: every image resolves via the kustomization images (no latest)" % tag, p)

    # Workload shape.
    p = []
    if len(deployments) != 2:
        p.append("%d Deployments (want 2: the relay and the MCP front door)" % len(deployments))
    for d in deployments:
        spec = d["spec"]
        if not selects(spec["selector"].get("matchLabels"), spec["template"]["metadata"].get("labels") or {}):
            p.append("Deployment selector does not select its own pods")
    relay_deps = [d for d in deployments if any((c.get("args") or [None])[0] == "run"
                                                for c in d["spec"]["template"]["spec"].get("containers") or [])]
    mcp_deps = [d for d in deployments if d not in relay_deps]
    relay_labels = relay_deps[0]["spec"]["template"]["metadata"]["labels"] if relay_deps else {}
    mcp_labels = mcp_deps[0]["spec"]["template"]["metadata"]["labels"] if mcp_deps else {}
    other_pods = [labels for label, _, labels in pods if not label.startswith("Deployment/")]
    for pdb in by_kind.get("PodDisruptionBudget", []):
        sel = pdb["spec"].get("selector", {}).get("matchLabels")
        name = pdb["metadata"]["name"]
        if pdb["spec"].get("minAvailable") != 1:
            p.append("PodDisruptionBudget %s minAvailable is not 1" % name)
        if selects(sel, relay_labels) == selects(sel, mcp_labels):
            p.append("PodDisruptionBudget %s selects %s" % (
                name, "both workloads" if selects(sel, relay_labels) else "neither workload"))
        if any(selects(sel, labels) for labels in other_pods):
            p.append("PodDisruptionBudget %s also selects the migrate Job's pods" % name)
    for what, labels in (("relay", relay_labels), ("MCP front door", mcp_labels)):
        n = sum(1 for pdb in by_kind.get("PodDisruptionBudget", [])
                if selects(pdb["spec"].get("selector", {}).get("matchLabels"), labels))
        if n != 1:
            p.append("%d PodDisruptionBudgets select the %s pods (want 1)" % (n, what))
    for svc in by_kind.get("Service", []):
        sel = svc["spec"].get("selector")
        to_relay, to_mcp = selects(sel, relay_labels), selects(sel, mcp_labels)
        if to_relay == to_mcp:
            p.append("Service %s selects %s" % (svc["metadata"]["name"],
                                                "both workloads" if to_relay else "neither workload"))
        if any(selects(sel, labels) for labels in other_pods):
            p.append("Service %s also selects the migrate Job's pods" % svc["metadata"]["name"])
        port_names = {pt.get("name") for pt in ((relay if to_relay else mcp) or {}).get("ports") or []}
        for pt in svc["spec"].get("ports") or []:
            if isinstance(pt.get("targetPort"), str) and pt["targetPort"] not in port_names:
                p.append("Service port %s targets unknown container port %s" % (pt.get("name"), pt["targetPort"]))
    for job in by_kind.get("Job", []):
        spec = job["spec"]
        for field in ("backoffLimit", "ttlSecondsAfterFinished"):
            if not isinstance(spec.get(field), int):
                p.append("Job %s: no %s" % (job["metadata"]["name"], field))
        args = spec["template"]["spec"]["containers"][0].get("args") or []
        if args[:1] != ["migrate"]:
            p.append("Job %s does not run migrate (args %r)" % (job["metadata"]["name"], args))
        if spec["template"]["spec"].get("restartPolicy") not in ("Never", "OnFailure"):
            p.append("Job %s: restartPolicy" % job["metadata"]["name"])
    for sa in by_kind.get("ServiceAccount", []):
        if sa.get("automountServiceAccountToken") is not False:
            p.append("ServiceAccount %s mounts its token" % sa["metadata"]["name"])
    for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"):
        if kind in by_kind:
            p.append("%s in the render: the relay needs no API access" % kind)
    check("%s: selectors (each Service selects one workload; one PodDisruptionBudget per workload, "
          "minAvailable 1), migrate Job, ServiceAccount without API access" % tag, p)

    # The MCP front door: its port, probes, listen address, database login and options.
    p = []
    if mcp is None:
        p.append("no MCP front door container (args [mcp]) in a Deployment")
    else:
        ports = {pt.get("name"): pt.get("containerPort") for pt in mcp.get("ports") or []}
        if ports.get("mcp") != 9465:
            p.append("the front door's container port mcp is not 9465: %r" % ports)
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = (mcp.get(probe) or {}).get("httpGet") or {}
            if get.get("path") != path or get.get("port") != "mcp":
                p.append("front door %s is not %s on port mcp: %r" % (probe, path, get))
        if env_value(objs, mcp_pod, mcp, "OUTBOX_RELAY_MCP_LISTEN") != "0.0.0.0:9465":
            p.append("OUTBOX_RELAY_MCP_LISTEN is not 0.0.0.0:9465")
        db = [e for e in mcp.get("env") or [] if e["name"] == "DATABASE_URL"]
        ref = ((db[0].get("valueFrom") or {}).get("secretKeyRef") or {}) if db else {}
        others = set()
        for label, pod, _ in pods:
            for _, c in containers(pod):
                if c is mcp:
                    continue
                for e in c.get("env") or []:
                    if e["name"] == "DATABASE_URL" and "secretKeyRef" in (e.get("valueFrom") or {}):
                        others.add(e["valueFrom"]["secretKeyRef"]["name"])
        if not ref.get("name") or ref["name"] in others:
            p.append("the front door's DATABASE_URL is not its own Secret (an outbox_mcp login): %r, "
                     "the others use %s" % (ref, ", ".join(sorted(others))))
        wait = int(env_value(objs, mcp_pod, mcp, "OUTBOX_RELAY_MCP_WAIT_MS") or "20000")
        grace = mcp_pod.get("terminationGracePeriodSeconds", 30)
        if grace * 1000 < 5000 + 1000:
            p.append("terminationGracePeriodSeconds %s leaves no room for the 5 s stop" % grace)
        if wait > 55000:
            p.append("OUTBOX_RELAY_MCP_WAIT_MS %d is past the SDKs' 60 s" % wait)
    check("%s: the MCP front door: port 9465, probes, listen address, its own database "
          "login, a wait under the SDKs' timeout" % tag, p)

    # Host names (issue 35, item 16): each workload answers the names of the
    # Service in front of it, as the kubelet expands its environment: NAME,
    # NAME.NS, NAME.NS.svc and NAME.NS.svc.cluster.local.
    p = []
    hosts_seen = []
    for d, variable in ((relay_deps, "OUTBOX_RELAY_ADMIN_HOSTS"), (mcp_deps, "OUTBOX_RELAY_MCP_HOSTS")):
        if not d:
            p.append("no workload for %s" % variable)
            continue
        dep = d[0]
        pod = dep["spec"]["template"]["spec"]
        c = pod["containers"][0]
        env = kubelet_env(objs, dep, c)
        value = env.get(variable) or ""
        hosts = [h.strip() for h in value.split(",")]
        hosts_seen.append("%s=%s" % (variable, value))
        if "$(" in value:
            p.append("%s keeps an unexpanded reference: %r" % (variable, value))
        if "" in hosts:
            p.append("%s has an empty name: %r" % (variable, value))
        ns = dep["metadata"].get("namespace") or "default"
        labels = dep["spec"]["template"]["metadata"].get("labels") or {}
        services = [svc["metadata"]["name"] for svc in by_kind.get("Service", [])
                    if selects(svc["spec"].get("selector"), labels)]
        if not services:
            p.append("no Service selects %s" % dep["metadata"]["name"])
        for svc in services:
            for name in (svc, "%s.%s" % (svc, ns), "%s.%s.svc" % (svc, ns), "%s.%s.svc.cluster.local" % (svc, ns)):
                if name not in hosts:
                    p.append("%s of %s lacks %s (a caller using it gets 403): %r"
                             % (variable, dep["metadata"]["name"], name, value))
    check("%s: the Host allow-lists hold their Service's own names in the namespace, with the cluster "
          "domain, as the kubelet expands them (%s)" % (tag, "; ".join(hosts_seen)), p)

    # The migrate step of deploy/README.md (issue 35, item 14): its selector
    # takes the migrate Job and what the Job needs, nothing that must wait for
    # the migration; any other selective apply (roll back) takes all but the Job.
    p = []
    jobs = by_kind.get("Job", [])
    needs = set()
    for job in jobs:
        needs.add(("Job", job["metadata"]["name"]))
        jpod = job["spec"]["template"]["spec"]
        if jpod.get("serviceAccountName"):
            needs.add(("ServiceAccount", jpod["serviceAccountName"]))
        for _, c in containers(jpod):
            for src in c.get("envFrom") or []:
                if "configMapRef" in src:
                    needs.add(("ConfigMap", src["configMapRef"]["name"]))
            for e in c.get("env") or []:
                ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
                if ref:
                    needs.add(("ConfigMap", ref["name"]))
        for v in jpod.get("volumes") or []:
            if "configMap" in v:
                needs.add(("ConfigMap", v["configMap"]["name"]))
    everything = {(o["kind"], o["metadata"]["name"]) for o in objs}
    migrate_steps = [st for st in APPLY_STEPS if st[2]]
    if len(migrate_steps) < 2:
        p.append("deploy/README.md has %d migrate steps (kubectl apply -k … -l …, then wait for the Job); "
                 "want one in Deploy and one in Upgrade" % len(migrate_steps))
    for line, sel, is_migrate in APPLY_STEPS:
        terms = selector_terms(sel)
        got = {(o["kind"], o["metadata"]["name"]) for o in objs
               if label_selects(terms, o["metadata"].get("labels") or {})}
        want = needs if is_migrate else everything - {("Job", j["metadata"]["name"]) for j in jobs}
        for kind, name in sorted(got - want):
            p.append("README.md:%d -l '%s' %s %s/%s%s" % (
                line, sel, "also applies" if is_migrate else "applies", kind, name,
                " before the migration" if is_migrate else " (the migrate Job must not run)"))
        for kind, name in sorted(want - got):
            p.append("README.md:%d -l '%s' leaves out %s/%s" % (line, sel, kind, name))
    check("%s: deploy/README.md's migrate steps select the migrate Job and what it needs (%s) only; "
          "roll back selects all but the Job" % (tag, ", ".join("%s/%s" % k for k in sorted(needs))), p)

    # Monitoring (issue 35, item 17): every Service is scraped by a
    # ServiceMonitor on one of its ports, each as a job of its own; every
    # workload has a NetworkPolicy letting its ports in and DNS and PostgreSQL out.
    p = []
    jobs = {}
    for svc in by_kind.get("Service", []):
        svc_labels = svc["metadata"].get("labels") or {}
        ports = {pt.get("name") for pt in svc["spec"].get("ports") or []}
        hits = []
        for sm in by_kind.get("ServiceMonitor", []):
            if not selects((sm["spec"].get("selector") or {}).get("matchLabels"), svc_labels):
                continue
            for ep in sm["spec"].get("endpoints") or []:
                if ep.get("port") in ports and ep.get("path", "/metrics") == "/metrics":
                    job = None
                    for rl in ep.get("relabelings") or []:
                        if rl.get("targetLabel") == "job" and rl.get("action", "replace") == "replace" \
                                and "replacement" in rl and not rl.get("sourceLabels"):
                            job = rl["replacement"]
                    if job is None:
                        job = svc_labels.get(sm["spec"].get("jobLabel") or "", svc["metadata"]["name"])
                    hits.append((sm["metadata"]["name"], job))
        if not hits:
            p.append("no ServiceMonitor scrapes Service %s" % svc["metadata"]["name"])
        for sm_name, job in hits:
            jobs.setdefault(job, []).append(svc["metadata"]["name"])
    for job, svcs in jobs.items():
        if len(set(svcs)) > 1:
            p.append("job %s scrapes Services %s together" % (job, ", ".join(sorted(set(svcs)))))
    rule_text = " ".join(str(r.get("expr", "")) for o in by_kind.get("PrometheusRule", [])
                         for g in o["spec"].get("groups") or [] for r in g.get("rules") or [])
    for job in re.findall(r'up\{job="([^"]+)"\}', rule_text):
        if job not in jobs:
            p.append("an alert uses up{job=\"%s\"}, a job no ServiceMonitor makes (%s)" % (job, ", ".join(sorted(jobs))))
    check("%s: every Service is scraped by a ServiceMonitor as a job of its own (%s)"
          % (tag, ", ".join("%s=%s" % (j, ",".join(v)) for j, v in sorted(jobs.items()))), p)

    p = []
    for d in deployments:
        labels = d["spec"]["template"]["metadata"].get("labels") or {}
        pod = d["spec"]["template"]["spec"]
        cports = {pt.get("containerPort") for c in pod.get("containers") or [] for pt in c.get("ports") or []}
        pols = [np_ for np_ in by_kind.get("NetworkPolicy", [])
                if selects(np_["spec"].get("podSelector", {}).get("matchLabels"), labels)]
        if len(pols) != 1:
            p.append("%d NetworkPolicies select Deployment %s (want 1)" % (len(pols), d["metadata"]["name"]))
            continue
        spec = pols[0]["spec"]
        if set(spec.get("policyTypes") or []) != {"Ingress", "Egress"}:
            p.append("NetworkPolicy %s: policyTypes %r" % (pols[0]["metadata"]["name"], spec.get("policyTypes")))
        in_ports = {pt.get("port") for r in spec.get("ingress") or [] for pt in r.get("ports") or []}
        out_ports = {pt.get("port") for r in spec.get("egress") or [] for pt in r.get("ports") or []}
        if in_ports != cports:
            p.append("NetworkPolicy %s lets in ports %r, the pods serve %r"
                     % (pols[0]["metadata"]["name"], sorted(in_ports), sorted(cports)))
        if not {53, 5432} <= out_ports:
            p.append("NetworkPolicy %s does not let out DNS and PostgreSQL: %r" % (pols[0]["metadata"]["name"], out_ports))
        for r in spec.get("ingress") or []:
            for peer in r.get("from") or []:
                if (peer.get("podSelector") or {}).get("matchLabels"):
                    p.append("NetworkPolicy %s names peers by matchLabels (commonLabels rewrites them)"
                             % pols[0]["metadata"]["name"])
    check("%s: one NetworkPolicy per workload: its ports in, DNS and PostgreSQL out" % tag, p)

    # The "down" alerts (kube-state-metrics) each match exactly one Deployment.
    p = []
    down = {}
    for o in by_kind.get("PrometheusRule", []):
        for g in o["spec"].get("groups") or []:
            for r in g.get("rules") or []:
                for sel in re.findall(r"kube_deployment_status_replicas_available\{([^}]*)\}", str(r.get("expr", ""))):
                    matchers = re.findall(r'deployment\s*(=~|!~|=|!=)\s*"([^"]*)"', sel)
                    def matches(name):
                        for op, v in matchers:
                            hit = re.fullmatch(v, name) is not None if "~" in op else name == v
                            if hit != (op in ("=~", "=")):
                                return False
                        return True
                    down[r["alert"]] = [d["metadata"]["name"] for d in deployments if matches(d["metadata"]["name"])]
    for alert, hit in sorted(down.items()):
        if len(hit) != 1:
            p.append("%s matches %d Deployments: %s" % (alert, len(hit), ", ".join(hit) or "none"))
    for d in deployments:
        n = [a for a, hit in down.items() if d["metadata"]["name"] in hit]
        if len(n) != 1:
            p.append("Deployment %s is watched by %d down alerts (%s)" % (d["metadata"]["name"], len(n), ", ".join(n)))
    check("%s: each Deployment has its own down alert, matching it only (%s)"
          % (tag, "; ".join("%s: %s" % (a, ",".join(h)) for a, h in sorted(down.items()))), p)

    # Alerts.
    anchors = runbook_anchors()
    p = []
    alerts = []
    metrics_used = set()
    for rule_obj in by_kind.get("PrometheusRule", []):
        if rule_obj.get("apiVersion") != "monitoring.coreos.com/v1":
            p.append("PrometheusRule apiVersion %s" % rule_obj.get("apiVersion"))
        for group in rule_obj["spec"].get("groups") or []:
            for rule in group.get("rules") or []:
                if "alert" not in rule:
                    continue
                alerts.append(rule["alert"])
                a = rule.get("annotations") or {}
                url = a.get("runbook_url", "")
                m = re.match(r"^https?://\S+/deploy/RUNBOOK\.md#([\w-]+)$", url)
                if not m:
                    p.append("%s: runbook_url %r does not point into deploy/RUNBOOK.md#anchor" % (rule["alert"], url))
                elif m.group(1) not in anchors:
                    p.append("%s: anchor #%s not in deploy/RUNBOOK.md" % (rule["alert"], m.group(1)))
                summary = a.get("summary", "")
                if not summary or "\n" in summary.strip():
                    p.append("%s: summary missing or not one line" % rule["alert"])
                if not (rule.get("labels") or {}).get("severity"):
                    p.append("%s: no severity label" % rule["alert"])
                expr = str(rule.get("expr", ""))
                metrics_used.update(re.findall(r"\b(outbox_[a-z_]+)\b", expr))
    exprs = " ".join(str(r.get("expr", "")) for o in by_kind.get("PrometheusRule", [])
                     for g in o["spec"].get("groups") or [] for r in g.get("rules") or [])
    for needle in ('outbox_intents{state="unknown"}', 'outbox_intents{state="in_flight"}',
                   "outbox_oldest_pending_age_seconds", 'class=~"permanent_failure|key_conflict"',
                   "outbox_target_circuit_open", "outbox_ready", "up{job=",
                   "kube_deployment_status_replicas_available", "outbox_db_reconnects_total",
                   'outbox_mcp_calls_total{status="failed"}',
                   'outbox_mcp_calls_total{status=~"pending|delivering|reconciling"}',
                   "outbox_mcp_refusals_total", "outbox_mcp_db_connections_ready",
                   'up{job="outbox-relay-mcp"}'):
        if needle not in exprs:
            p.append("no alert uses %s" % needle)
    unknown = metrics_used - KNOWN_METRICS
    if unknown:
        p.append("unknown metric names: %s" % ", ".join(sorted(unknown)))
    if len(alerts) != len(set(alerts)):
        p.append("duplicate alert names")
    check("%s: %d alerts, each with a one-line summary, a severity and a runbook_url anchor in %s"
          % (tag, len(alerts), RUNBOOK), p)

    if tag != "base":
        p = []
        ns = {o["metadata"].get("namespace") for o in objs}
        if len(ns) != 1 or None in ns:
            p.append("objects are not all in one namespace: %r" % ns)
        check("%s: sets one namespace for every object" % tag, p)


for kdir, path in renders.items():
    check_render("base" if kdir == "deploy/kubernetes" else os.path.basename(kdir), path, kdir)

# ------------------------------------------------------------ kustomizations
p = []
for k in glob.glob("deploy/kubernetes/**/kustomization.yaml", recursive=True):
    with open(k) as f:
        doc = yaml.safe_load(f) or {}
    if doc.get("secretGenerator"):
        p.append("%s has a secretGenerator" % k)
overlay = kustomization("deploy/kubernetes/overlays/example")
if not overlay.get("images") or not any(e.get("newTag") or e.get("digest") for e in overlay["images"]):
    p.append("the example overlay sets no image tag")
overlay_text = " ".join(open(f).read() for f in glob.glob("deploy/kubernetes/overlays/example/*.yaml"))
if "replicas:" not in overlay_text:
    p.append("the example overlay does not set replicas")
if "secretKeyRef/name" not in overlay_text or "secretRef/name" not in overlay_text:
    p.append("the example overlay does not rename the Secret references")
base = kustomization("deploy/kubernetes/base")
if not base.get("images"):
    p.append("base kustomization has no images:")
if not base.get("commonLabels") and not base.get("labels"):
    p.append("base kustomization has no common labels")
check("kustomizations: images and common labels in the base; the overlay sets tag, replicas and "
      "Secret names; no secretGenerator", p)

# ------------------------------------------------------------ secret values in deploy/
PLACEHOLDER = re.compile(r"^(\$\{?\w+\}?|\"?\$\w+\"?|[A-Z][A-Z0-9_]*|…|\.\.\.|<[^>]*>|\*+|x+|%s(\\n)?|true|false|null|\[\]|\{\})$")
patterns = [
    ("a URL with a password", re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:([^@\s/'\"]+)@")),
    ("a SQL password", re.compile(r"PASSWORD\s+'([^']*)'", re.I)),
    ("a secret assignment", re.compile(
        r"(?<![A-Za-z])(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key)[\"']?\s*[:=]\s*[\"']?([^\s\"',;)]+)", re.I)),
]
raw = [
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a Standard Webhooks secret", re.compile(r"whsec_[A-Za-z0-9+/=]{8,}")),
    ("a cloud or forge token", re.compile(r"\b(AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{16,})\b")),
    ("a JWT", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.")),
]
p = []
for path in sorted(glob.glob("deploy/**", recursive=True)):
    if not os.path.isfile(path):
        continue
    with open(path, errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            # deploy/docker-compose.yml: a local-only default, overridden from the environment
            line = re.sub(r"\$\{\w+:-local-only-[\w-]*\}", "${LOCAL_ONLY}", line)
            for what, rx in patterns:
                for value in rx.findall(line):
                    if value and not PLACEHOLDER.match(value) and not value.startswith(("$", "'$", "\"$")):
                        p.append("%s:%d: %s (%s)" % (path, lineno, what, value[:4] + "…"))
            for what, rx in raw:
                if rx.search(line):
                    p.append("%s:%d: %s" % (path, lineno, what))
    if path.endswith((".yaml", ".yml")):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if isinstance(doc, dict) and doc.get("kind") == "Secret":
                    p.append("%s: a Secret object" % path)
check("no secret values anywhere in deploy/ (passwords, tokens, keys, Secret objects)", p)

# ------------------------------------------------------------ Dockerfile
with open("deploy/Dockerfile") as f:
    dockerfile = f.read()
# Join continuation lines, drop comments.
logical = []
for line in re.sub(r"\\\n", " ", dockerfile).splitlines():
    if line.strip() and not line.lstrip().startswith("#"):
        logical.append(line.strip())
instr = [(l.split(None, 1)[0].upper(), l.split(None, 1)[1] if " " in l else "") for l in logical]
stages = []
for op, arg in instr:
    if op == "FROM":
        stages.append({"from": arg, "ops": []})
    elif stages:
        stages[-1]["ops"].append((op, arg))

p = []
if len(stages) < 2:
    p.append("not multi-stage (%d FROM)" % len(stages))
for s in stages:
    image = s["from"].split()[0]
    if "bookworm" not in image:
        p.append("FROM %s is not a bookworm image" % image)
    if image.endswith(":latest") or (":" not in image and "@" not in image):
        p.append("FROM %s has no tag or a latest tag" % image)
check("Dockerfile: multi-stage, every FROM a bookworm image with an explicit tag", p)

runtime = stages[-1]["ops"] if stages else []
build_ops = [op for s in stages[:-1] for op in s["ops"]]
p = []
users = [arg for op, arg in runtime if op == "USER"]
if not users:
    p.append("no USER in the runtime stage")
else:
    m = re.match(r"^(\d+)(?::(\d+))?$", users[-1].strip())
    if not m or int(m.group(1)) == 0:
        p.append("USER %s is not a numeric non-root uid" % users[-1])
entry = [arg for op, arg in runtime if op == "ENTRYPOINT"]
cmd = [arg for op, arg in runtime if op == "CMD"]
try:
    if not entry or json.loads(entry[-1]) != ["/usr/local/bin/outbox-relay"]:
        p.append("ENTRYPOINT is not [\"/usr/local/bin/outbox-relay\"]: %r" % entry)
    if not cmd or json.loads(cmd[-1]) != ["run"]:
        p.append("CMD is not [\"run\"]: %r" % cmd)
except ValueError as e:
    p.append("ENTRYPOINT/CMD not in exec (JSON) form: %s" % e)
copies = [arg for op, arg in runtime if op == "COPY"]
if not any(re.search(r"^(--\S+\s+)*migrations/?\s+/usr/share/outbox-relay/migrations/?$", c) for c in copies):
    p.append("the runtime stage does not COPY migrations/ to /usr/share/outbox-relay/migrations/")
if not any(re.search(r"--from=\S+\s+\S*build/outbox-relay\s+/usr/local/bin/outbox-relay$", c) for c in copies):
    p.append("the runtime stage does not COPY --from the build stage's build/outbox-relay")
if not any(op == "RUN" and re.search(r"\bmake\s+build/outbox-relay\b", arg) for s in stages[:-1] for op, arg in s["ops"]):
    p.append("the build stage does not run make build/outbox-relay")
with open("Makefile") as f:
    if not re.search(r"^build/outbox-relay:", f.read(), re.M):
        p.append("Makefile has no build/outbox-relay target")
migrate_default = False
if os.path.exists("relay/cli/migrate.c"):
    with open("relay/cli/migrate.c") as f:
        migrate_default = "/usr/share/outbox-relay/migrations" in f.read()
if not migrate_default and "OUTBOX_RELAY_MIGRATIONS_DIR" not in dockerfile:
    p.append("migrate no longer looks in /usr/share/outbox-relay/migrations by default, "
             "and the Dockerfile does not set OUTBOX_RELAY_MIGRATIONS_DIR")
check("Dockerfile: USER numeric non-root, ENTRYPOINT the relay, CMD run, builds with make, "
      "copies the binary and migrations where migrate looks", p)

p = []
for s in stages:
    for op, arg in s["ops"]:
        if op == "ADD":
            p.append("ADD (use COPY): %s" % arg)
        if op != "RUN":
            continue
        if re.search(r"\bsudo\b", arg):
            p.append("sudo in RUN")
        if re.search(r"\bapt(-get)?\s+(-\S+\s+)*(install|upgrade|dist-upgrade)\b", arg):
            if re.search(r"\bapt\s", arg):
                p.append("apt (use apt-get) in RUN")
            if "--no-install-recommends" not in arg:
                p.append("apt-get install without --no-install-recommends")
            if not re.search(r"\s-y\b|--yes|--assume-yes", arg):
                p.append("apt-get install without -y")
            if "apt-get update" not in arg:
                p.append("apt-get install without apt-get update in the same RUN")
            if "rm -rf /var/lib/apt/lists/*" not in arg:
                p.append("apt lists not removed in the RUN that installs")
            if re.search(r"apt-get\s+(-\S+\s+)*(upgrade|dist-upgrade)", arg):
                p.append("apt-get upgrade in the image")
        elif "apt-get update" in arg:
            p.append("apt-get update alone in a RUN")
        if re.search(r"\b(curl|wget)\b.*\|\s*(ba)?sh", arg):
            p.append("curl | sh")
check("Dockerfile lint: --no-install-recommends, -y, update+install+rm -rf /var/lib/apt/lists/* "
      "in one RUN, no ADD, no sudo, no upgrade", p)

# Runtime packages: only runtime libraries, and every library the binary links.
p = []
runtime_pkgs = set()
for op, arg in runtime:
    if op == "RUN":
        for m in re.finditer(r"apt-get\s+install\s+((?:\S+\s*)+?)(?:&&|;|$)", arg):
            runtime_pkgs.update(w for w in m.group(1).split() if not w.startswith("-"))
for pkg in sorted(runtime_pkgs):
    if pkg.endswith("-dev") or pkg in ("build-essential", "gcc", "make", "pkg-config", "curl", "wget"):
        p.append("runtime stage installs %s" % pkg)
expected = {"libpq5", "libcurl4", "libuv1", "libjansson4", "libssl3", "libgmp10", "ca-certificates"}
if not expected <= runtime_pkgs:
    p.append("runtime stage lacks %s" % ", ".join(sorted(expected - runtime_pkgs)))
check("Dockerfile: the runtime stage installs runtime libraries only (%s)" % " ".join(sorted(runtime_pkgs)), p)

if not os.path.exists(relay_bin) or not shutil.which("dpkg") or not shutil.which("readelf") \
        or not shutil.which("ldconfig"):
    skip("build/outbox-relay, dpkg, readelf or ldconfig missing: libraries not compared")
else:
    p = []
    needed = re.findall(r"\(NEEDED\).*\[(.+?)\]",
                        subprocess.run(["readelf", "-d", relay_bin], capture_output=True, text=True).stdout)
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    owners = {}
    for soname in needed:
        m = re.search(r"^\s*%s \(([^)]*)\) => (\S+)" % re.escape(soname), cache, re.M)
        if not m:
            p.append("%s: not found by ldconfig" % soname)
            continue
        path = os.path.realpath(m.group(2))
        out = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True).stdout \
            or subprocess.run(["dpkg", "-S", m.group(2)], capture_output=True, text=True).stdout
        pkg = out.split(":", 1)[0].strip() if out else ""
        owners[soname] = pkg
        if pkg and pkg != "libc6" and pkg not in runtime_pkgs:
            p.append("build/outbox-relay needs %s from %s, which the runtime stage does not install"
                     % (soname, pkg))
        if not pkg:
            p.append("%s: no Debian package owns %s" % (soname, path))
    check("Dockerfile: the runtime stage installs every library build/outbox-relay links (%s)"
          % ", ".join("%s" % v for v in sorted(set(owners.values()))), p)

# Build context: what the Dockerfile COPYs is not excluded by Dockerfile.dockerignore.
p = []
ignore_file = "deploy/Dockerfile.dockerignore"
if os.path.exists(ignore_file):
    with open(ignore_file) as f:
        rules = [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]
    def excluded(path):
        parts = path.strip("/").split("/")
        result = False
        for rule in rules:
            neg = rule.startswith("!")
            pat = rule[1:] if neg else rule
            pat = pat.strip("/")
            for i in range(1, len(parts) + 1):
                if fnmatch.fnmatch("/".join(parts[:i]), pat):
                    result = not neg
                    break
        return result
    for s in stages:
        for op, arg in s["ops"]:
            if op != "COPY" or "--from" in arg:
                continue
            srcs = [w for w in arg.split() if not w.startswith("--")][:-1]
            for src in srcs:
                if excluded(src):
                    p.append("COPY %s is excluded by %s" % (src, ignore_file))
    for must_exclude in ("build", ".git"):
        if not excluded(must_exclude):
            p.append("%s/ is not excluded from the build context" % must_exclude)
check("Dockerfile.dockerignore: keeps what COPY needs, leaves out build/ and .git", p)

# ------------------------------------------------------------ docs
p = []
with open("deploy/README.md") as f:
    readme = f.read()
if not re.search(r"docker build -f deploy/Dockerfile( -t \S+)? \.$", readme, re.M):
    p.append("deploy/README.md does not show docker build -f deploy/Dockerfile [-t IMAGE] .")
for needle in ("kubectl", "create secret", "## Deploy", "## Scale", "## Upgrade", "## Roll back",
               "SKIP LOCKED", "forward-only"):
    if needle not in readme:
        p.append("deploy/README.md does not mention %r" % needle)
with open(RUNBOOK) as f:
    runbook = f.read()
for needle in ("outbox.stuck", "outbox.resolve(", "outbox.approve(", "outbox.reject(",
               "enabled = false", "OR003", "take-over", "reconnect"):
    if needle not in runbook:
        p.append("deploy/RUNBOOK.md does not mention %r" % needle)
for target in re.findall(r"\]\((?:RUNBOOK\.md)?#([\w-]+)\)", runbook):
    if target not in runbook_anchors():
        p.append("RUNBOOK.md links to missing anchor #%s" % target)
for target in re.findall(r"\]\(RUNBOOK\.md#([\w-]+)\)", readme):
    if target not in runbook_anchors():
        p.append("README.md links to missing RUNBOOK anchor #%s" % target)
check("deploy/README.md and deploy/RUNBOOK.md cover deploy, scale, upgrade, roll back and the "
      "operator SQL; internal links resolve", p)

# ------------------------------------------------------------ the front door beside the relay
# (issue 35, item 17): the dashboard, the runbook, compose, the docs.
p = []
with open("deploy/grafana/outbox-relay.json") as f:
    dash_text = f.read()
for metric in MCP_METRICS:
    if metric not in dash_text:
        p.append("the dashboard has no query of %s" % metric)
for alert in re.findall(r"alert:\s*(OutboxMcp\w+)", open("deploy/kubernetes/base/prometheusrule.yaml").read()):
    if "## %s" % alert not in runbook:
        p.append("deploy/RUNBOOK.md has no section %s" % alert)
if not re.search(r"^## OutboxMcp", runbook, re.M):
    p.append("deploy/RUNBOOK.md has no section for a front door alert")
with open("deploy/docker-compose.yml") as f:
    compose = yaml.safe_load(f)
services = compose.get("services") or {}
mcp_svc = [n for n, sv in services.items() if (sv.get("command") or [None])[0] == "mcp"]
if len(mcp_svc) != 1:
    p.append("deploy/docker-compose.yml runs %d front doors (services with command [mcp])" % len(mcp_svc))
else:
    sv = services[mcp_svc[0]]
    env = sv.get("environment") or {}
    if env.get("OUTBOX_RELAY_MCP_LISTEN") != "0.0.0.0:9465":
        p.append("compose %s: OUTBOX_RELAY_MCP_LISTEN is not 0.0.0.0:9465" % mcp_svc[0])
    if not any(str(pt).startswith("127.0.0.1:") for pt in sv.get("ports") or []):
        p.append("compose %s: no port published on 127.0.0.1" % mcp_svc[0])
    login = env.get("PGUSER")
    init = open("deploy/compose/initdb.sql").read() + open("deploy/compose/setup.sql").read()
    if not login or not re.search(r"GRANT outbox_mcp TO %s\b" % re.escape(str(login)), init):
        p.append("compose %s: its login %r is not granted outbox_mcp by deploy/compose/*.sql" % (mcp_svc[0], login))
    if re.search(r"GRANT [^;]*\b(outbox_relay|outbox_app|outbox_admin|outbox_operator)\b[^;]*TO %s\b"
                 % re.escape(str(login)), init):
        p.append("compose %s: its login %s is granted more than outbox_mcp" % (mcp_svc[0], login))
with open("docs/operations.md") as f:
    ops = f.read()
roles = re.search(r"^## Roles\n(.*?)(?=^## )", ops, re.M | re.S)
if not roles or not re.search(r"^\| `outbox_mcp` \|", roles.group(1), re.M):
    p.append("docs/operations.md's roles table has no outbox_mcp row")
if "outbox_mcp" not in ops or "outbox-relay-mcp" not in ops:
    p.append("docs/operations.md does not cover the front door (its role outbox_mcp, its Deployment outbox-relay-mcp)")
if "outbox-relay-mcp-database" not in README:
    p.append("deploy/README.md does not name the front door's Secret")
check("the MCP front door beside the relay: dashboard queries of %s, a runbook section per alert, a "
      "compose service with an outbox_mcp login, docs/operations.md's roles and front door" % ", ".join(MCP_METRICS), p)
PYTHON
rc=$?
while IFS=$'\t' read -r status desc detail; do
    case $status in
        PASS) pass "$desc" ;;
        FAIL) fail "$desc" "$(tr '|' '\n' <<<"$detail" | sed -e 's/^ //')" ;;
        SKIP) skip "$desc" ;;
    esac
done <"$TMP/checks.out"
if [ "$rc" != 0 ]; then
    fail "manifest checks ran to the end (python exited $rc)" "$(tail -n 5 "$TMP/checks.err")"
fi

echo "1..$N"
[ "$FAILED" = 0 ]
