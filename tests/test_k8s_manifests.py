#!/usr/bin/python3
"""The Kubernetes manifests (deploy/k8s), parsed as a cluster would read
them (no cluster here): every resource the kustomization lists is there;
every pod runs under the runtime's default seccomp profile, as a non-root
uid, with no privilege escalation, no capabilities and a read-only root,
init containers included (none runs as root); the PS shards have a
PodDisruptionBudget that lets one go at a time; the agent's socket
directory is the node's (made by node-tmpfiles.conf), never created
root-owned by kubelet; the probes run in the container.

usage: test_k8s_manifests.py SOURCE_DIR
"""
import os
import re
import sys

import yaml

SRC = sys.argv[1]
K8S = os.path.join(SRC, "deploy", "k8s")
problems = []


def check(cond, what):
    if not cond:
        problems.append(what)


def pod_specs(doc):
    if doc.get("kind") in ("StatefulSet", "DaemonSet", "Deployment"):
        yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]


def check_pod(name, spec):
    pod_sc = spec.get("securityContext", {})
    check(pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
          f"{name}: no seccompProfile RuntimeDefault in the pod's securityContext")
    check(pod_sc.get("runAsNonRoot") is True, f"{name}: the pod does not set runAsNonRoot")
    check(pod_sc.get("runAsUser", 0) != 0, f"{name}: the pod runs as uid 0")
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind, []):
            sc = c.get("securityContext", {})
            who = f"{name}/{c['name']} ({kind})"
            check(sc.get("runAsUser", pod_sc.get("runAsUser", 0)) != 0, f"{who}: runs as uid 0")
            check(sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True,
                  f"{who}: runAsNonRoot is not set")
            check(sc.get("allowPrivilegeEscalation") is False,
                  f"{who}: allowPrivilegeEscalation is not false")
            check(sc.get("capabilities", {}).get("drop") == ["ALL"],
                  f"{who}: capabilities are not all dropped")
            check(sc.get("readOnlyRootFilesystem") is True, f"{who}: the root filesystem is writable")
            for probe in ("readinessProbe", "livenessProbe"):
                if probe in c:
                    check("exec" in c[probe], f"{who}: {probe} is not run in the container")
    for v in spec.get("volumes", []):
        if "hostPath" in v:
            check(v["hostPath"].get("type") == "Directory",
                  f"{name}: hostPath {v['hostPath']['path']} is {v['hostPath'].get('type')}, "
                  "not Directory (kubelet would create it root-owned)")


def main():
    kust = yaml.safe_load(open(os.path.join(K8S, "kustomization.yaml")))
    docs = []
    for res in kust["resources"]:
        path = os.path.join(K8S, res)
        check(os.path.exists(path), f"kustomization lists {res}, which is not there")
        if os.path.exists(path):
            docs += [d for d in yaml.safe_load_all(open(path)) if d]
    for f in os.listdir(K8S):
        if f.endswith(".yaml") and f != "kustomization.yaml":
            check(f in kust["resources"], f"{f} is not in the kustomization")
    pods = 0
    for doc in docs:
        for name, spec in pod_specs(doc):
            pods += 1
            check_pod(name, spec)
    check(pods >= 2, f"only {pods} pod templates")
    pdbs = [d for d in docs if d.get("kind") == "PodDisruptionBudget"]
    ps_labels = next(d["spec"]["template"]["metadata"]["labels"] for d in docs
                     if d.get("kind") == "StatefulSet")
    check(any(p["spec"].get("maxUnavailable") == 1 and
              p["spec"]["selector"]["matchLabels"].items() <= ps_labels.items() for p in pdbs),
          "no PodDisruptionBudget with maxUnavailable 1 selects the PS shards")
    tmpfiles = open(os.path.join(K8S, "node-tmpfiles.conf")).read()
    check(re.search(r"^d /run/shadowsync 0750 10001 10001", tmpfiles, re.M),
          "node-tmpfiles.conf does not make /run/shadowsync 0750 for uid 10001")
    for p in problems:
        print("FAIL:", p)
    print(f"k8s manifests: {len(docs)} resources, {pods} pod templates, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
