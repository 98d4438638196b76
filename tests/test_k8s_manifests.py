#!/usr/bin/python3
"""The Kubernetes manifests (deploy/k8s), parsed as a cluster would read
them (no cluster here): every resource the kustomization lists is there;
every pod runs under the runtime's default seccomp profile, as a non-root
uid, with no privilege escalation, no capabilities and a read-only root,
init containers included (none runs as root); the PS shards have a
PodDisruptionBudget that lets one go at a time; the agent's socket
directory is the node's (made by node-tmpfiles.conf), never created
root-owned by kubelet; the probes run in the container. The PS pods read
the shard map the ps-map ConfigMap mounts, name themselves in it by their
stable pod names, and that map is what `shadowsync-ctl shard-map` makes
for the StatefulSet's replicas (the map built from the names); a grow
map (with "from") and bad settings through the same command.

usage: test_k8s_manifests.py SOURCE_DIR [SHADOWSYNC_CTL]
"""
import os
import re
import subprocess
import sys

import yaml

SRC = sys.argv[1]
CTL = sys.argv[2] if len(sys.argv) > 2 else None
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


def check_shard_map(docs):
    sts = next(d for d in docs if d.get("kind") == "StatefulSet")
    cm = next((d for d in docs if d.get("kind") == "ConfigMap" and
               d["metadata"]["name"] == "ps-map"), None)
    check(cm is not None, "no ps-map ConfigMap")
    if cm is None:
        return
    ps = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in ps.get("env", [])}
    mounts = {m["name"]: m["mountPath"] for m in ps.get("volumeMounts", [])}
    vols = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    map_vol = next((n for n, v in vols.items()
                    if v.get("configMap", {}).get("name") == "ps-map"), None)
    check(map_vol is not None and env.get("SHADOWSYNC_SHARD_MAP") ==
          os.path.join(mounts.get(map_vol, "?"), "fleet.map"),
          "the PS does not read the ps-map ConfigMap's fleet.map (SHADOWSYNC_SHARD_MAP)")
    port = next(p["containerPort"] for p in ps["ports"] if p["name"] == "grpc")
    svc = sts["spec"]["serviceName"]
    check(env.get("SHADOWSYNC_ADVERTISE") == f"$(POD_NAME).{svc}:{port}",
          "the PS does not name itself by its pod's stable name (SHADOWSYNC_ADVERTISE)")
    if not CTL:
        return
    def ctl(*args):
        return subprocess.run([CTL, "shard-map", *args], capture_output=True, text=True)
    made = ctl("--statefulset", sts["metadata"]["name"], "--service", svc, "--port", str(port),
               "--replicas", str(sts["spec"]["replicas"]), "--epoch", "1")
    check(made.returncode == 0 and made.stdout == cm["data"]["fleet.map"],
          f"ps-map's fleet.map is not what shadowsync-ctl shard-map makes: {made.stdout!r}")
    grow = ctl("--replicas", "3", "--from-replicas", "2", "--epoch", "2",
               "--namespace", "shadowsync")
    check(grow.returncode == 0 and grow.stdout ==
          "epoch 2\nps ps-0.ps.shadowsync.svc:7070,ps-1.ps.shadowsync.svc:7070,"
          "ps-2.ps.shadowsync.svc:7070\nfrom ps-0.ps.shadowsync.svc:7070,"
          "ps-1.ps.shadowsync.svc:7070\n", f"a grow map: {grow.stdout!r} {grow.stderr!r}")
    for bad in (["--replicas", "0"], ["--epoch", "0"], ["--service", "a:b"]):
        r = ctl(*bad)
        check(r.returncode == 2 and r.stderr, f"shard-map {bad} was not refused: {r.stdout!r}")


def check_peer_moves(docs):
    """Rows move between the PS pods: each reads the fleet's own token from
    a Secret other than the trainers', and the network policy of the PS
    pods admits the other PS pods on the gRPC port."""
    sts = next(d for d in docs if d.get("kind") == "StatefulSet")
    pod = sts["spec"]["template"]
    ps = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in ps.get("env", [])}
    mounts = {m["mountPath"]: m["name"] for m in ps.get("volumeMounts", [])}
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    def secret_of(var):
        path = env.get(var) or ""
        vol = vols.get(mounts.get(os.path.dirname(path), ""), {})
        return vol.get("secret", {}).get("secretName")
    peer, auth = secret_of("SHADOWSYNC_PEER_TOKEN_FILE"), secret_of("SHADOWSYNC_AUTH_TOKEN_FILE")
    check(peer is not None and auth is not None and peer != auth,
          f"the PS reads no peer token of its own from a Secret (peer {peer}, auth {auth})")
    port = next(p["containerPort"] for p in ps["ports"] if p["name"] == "grpc")
    labels = pod["metadata"]["labels"]
    check(admits(docs, labels, port, labels, None),
          f"no network policy admits the PS pods to each other on port {port}")


def admits(docs, target, port, pod, namespace):
    """Whether the network policies over pods labelled target admit, on
    port, a pod labelled pod from namespace (None: the policy's own; else
    that namespace's labels), as Kubernetes reads a `from` entry: a
    podSelector alone is the policy's namespace, a namespaceSelector with
    a podSelector needs both."""
    def matches(sel, labels):
        return sel is not None and sel.get("matchLabels", {}).items() <= labels.items()
    for pol in (d for d in docs if d.get("kind") == "NetworkPolicy"):
        if not matches(pol["spec"]["podSelector"], target):
            continue
        for rule in pol["spec"].get("ingress", []):
            if port not in [p.get("port") for p in rule.get("ports", [])]:
                continue
            for f in rule.get("from", []):
                ns_ok = (namespace is None) if "namespaceSelector" not in f else (
                    namespace is not None and matches(f["namespaceSelector"], namespace))
                pod_ok = "podSelector" not in f or matches(f["podSelector"], pod)
                if ns_ok and pod_ok:
                    return True
    return False


def check_agent_reads_its_token(docs):
    """The agent, as its pod's user, reads its token: the Secret's files
    are the pod's fsGroup's and readable by that group; and trainer pods
    of that group may use its socket (SHADOWSYNC_SOCKET_GROUP)."""
    ds = next(d for d in docs if d.get("kind") == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    sc = spec.get("securityContext", {})
    c = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    token = env.get("SHADOWSYNC_AUTH_TOKEN_FILE", "")
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    vol = {v["name"]: v for v in spec["volumes"]}.get(mounts.get(os.path.dirname(token), ""), {})
    mode = vol.get("secret", {}).get("defaultMode", 0o644)
    check(sc.get("fsGroup") == sc.get("runAsGroup") and mode & 0o040,
          f"the agent (uid {sc.get('runAsUser')}) cannot read {token}: fsGroup "
          f"{sc.get('fsGroup')}, mode {oct(mode)}")
    check(env.get("SHADOWSYNC_SOCKET_GROUP") == str(sc.get("runAsGroup")),
          "the agent's socket is for its own uid only: set SHADOWSYNC_SOCKET_GROUP to the "
          "group trainer pods carry")


def check_trainer_reach(docs):
    """Every client of the PS's gRPC port is admitted, and no other: the
    agents, trainer pods in the PS's namespace and in namespaces labelled
    for trainers; a trainer pod of an unlabelled namespace, or an
    unlabelled pod, is not."""
    sts = next(d for d in docs if d.get("kind") == "StatefulSet")
    ps_labels = sts["spec"]["template"]["metadata"]["labels"]
    agent = next(d for d in docs if d.get("kind") == "DaemonSet")
    agent_labels = agent["spec"]["template"]["metadata"]["labels"]
    trainer = {"shadowsync.io/trainer": "true"}
    team = {"kubernetes.io/metadata.name": "team-a", "shadowsync.io/trainers": "true"}
    for who, pod, ns, want in (("the agents", agent_labels, None, True),
                               ("a trainer pod beside the PS", trainer, None, True),
                               ("a trainer pod of a labelled namespace", trainer, team, True),
                               ("a trainer pod of an unlabelled namespace", trainer,
                                {"kubernetes.io/metadata.name": "other"}, False),
                               ("an unlabelled pod of a labelled namespace", {}, team, False)):
        check(admits(docs, ps_labels, 7070, pod, ns) == want,
              f"{who}: {'not ' if want else ''}admitted to the PS's port 7070")


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
    check_shard_map(docs)
    check_peer_moves(docs)
    check_trainer_reach(docs)
    check_agent_reads_its_token(docs)
    tmpfiles = open(os.path.join(K8S, "node-tmpfiles.conf")).read()
    check(re.search(r"^d /run/shadowsync 0750 10001 10001", tmpfiles, re.M),
          "node-tmpfiles.conf does not make /run/shadowsync 0750 for uid 10001")
    for p in problems:
        print("FAIL:", p)
    print(f"k8s manifests: {len(docs)} resources, {pods} pod templates, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
