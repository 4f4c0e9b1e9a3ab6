#!/usr/bin/env python3
"""tests/lib/kubelet_env.py — the environment the kubelet gives a container of a
rendered manifest, for the deploy/ checks (tests/integration/20_deploy_manifests.sh
imports kubelet_env; tests/integration/32_prometheus.sh runs it).

  kubelet_env.py RENDER DEPLOYMENT VARIABLE
      Print VARIABLE as the first container of Deployment DEPLOYMENT in RENDER
      (kubectl kustomize's output) sees it once the kubelet has expanded it.

What the kubelet does (pkg/kubelet, makeEnvironmentVariables): the envFrom
ConfigMaps first, then env in order; a value's $(VAR) references to variables
defined before it (envFrom's included) are expanded, $$ is a literal $, and an
undefined reference is left as written; fieldRef metadata.namespace is the
namespace the object is applied to ("default" for a render without one).
Secrets are not in a render: a secretKeyRef reads "<secret NAME/KEY>".
"""
import re
import sys

REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def kubelet_env(objs, obj, container):
    ns = obj["metadata"].get("namespace") or "default"
    env = {}
    for src in container.get("envFrom") or []:
        ref = src.get("configMapRef")
        for o in objs:
            if ref and o["kind"] == "ConfigMap" and o["metadata"]["name"] == ref["name"]:
                env.update(o.get("data") or {})
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = REFERENCE.sub(
                lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), str(e["value"]))
            continue
        vf = e.get("valueFrom") or {}
        if (vf.get("fieldRef") or {}).get("fieldPath") == "metadata.namespace":
            env[e["name"]] = ns
        elif "secretKeyRef" in vf:
            env[e["name"]] = "<secret %s/%s>" % (vf["secretKeyRef"]["name"], vf["secretKeyRef"]["key"])
        elif "configMapKeyRef" in vf:
            ref = vf["configMapKeyRef"]
            for o in objs:
                if o["kind"] == "ConfigMap" and o["metadata"]["name"] == ref["name"]:
                    env[e["name"]] = (o.get("data") or {}).get(ref["key"])
        else:
            env[e["name"]] = None
    return env


def main(argv):
    import yaml
    if len(argv) != 4:
        sys.exit(__doc__)
    with open(argv[1]) as f:
        objs = [o for o in yaml.safe_load_all(f) if o]
    for o in objs:
        if o["kind"] == "Deployment" and o["metadata"]["name"] == argv[2]:
            value = kubelet_env(objs, o, o["spec"]["template"]["spec"]["containers"][0]).get(argv[3])
            if value is None:
                sys.exit("kubelet_env: %s is not set in Deployment %s" % (argv[3], argv[2]))
            print(value)
            return
    sys.exit("kubelet_env: no Deployment %s in %s" % (argv[2], argv[1]))


if __name__ == "__main__":
    main(sys.argv)
