#!/usr/bin/env python3
"""Checks behind scripts/check-ops that no off-the-shelf tool does (run with .peers/venv's
Python: needs PyYAML, which kubernetes-validate brings).

  check-ops.py alert-rules RULES TESTS RUNBOOK METRICS
      every alert has a severity (page|ticket), summary, description and a runbook_url
      whose anchor is an `## Alert: <name>` heading of RUNBOOK (GitHub slug rules); every
      metric name is in METRICS (or Prometheus's own `up`); TESTS has, for every alert,
      a case where it fires and one where it stays silent.
  check-ops.py doc-links FILE...
      every relative link `](path)`, `](path#anchor)` and `](#anchor)` of the Markdown
      FILEs resolves to a file, and an anchor to a heading of its Markdown file.
  check-ops.py manifests RENDERED OUTDIR RULES {base|strict|strict-ha}
      splits `kubectl kustomize` output: core kinds -> OUTDIR/core.yaml (for
      kubernetes-validate), PrometheusRule groups -> OUTDIR/prometheusrule.rules.yml (for
      promtool), checking they equal RULES; checks the ServiceMonitor, the Deployment
      (probes, security context, config and secret wiring) and the config TOML; with
      `strict`, the strict-mode invariants (one replica, Recreate, latch file on a PVC,
      strict keys, termination message); with `strict-ha`, strict mode across replicas
      on etcd (two replicas, RollingUpdate maxUnavailable 0 / maxSurge 1, a
      PodDisruptionBudget of minAvailable 1 selecting the pods, required anti-affinity on
      kubernetes.io/hostname, coordination.backend = "etcd" with the endpoints and the
      credentials from a Secret, no PersistentVolumeClaim, the latch file on an emptyDir,
      readiness on /livez since a standby's /readyz is 503, termination message).
Prints one line per problem and exits 1 if there is any.
"""
import os
import re
import sys
import tomllib

import yaml

RUNBOOK_BASE = "https://github.com/tunnelgate/tunnelgate/blob/main/docs/runbook.md#"
SEVERITIES = {"page", "ticket"}
CRD_KINDS = {"PrometheusRule", "ServiceMonitor"}
OPS_PORT = 9464

problems = []


def bad(msg):
    problems.append(msg)


def slug(heading):
    """GitHub's heading anchor: lowercase, drop punctuation (keep letters, digits, _, -,
    spaces), spaces to hyphens. Inline code backticks are markup, not text."""
    text = heading.strip().replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def heading_slugs(path):
    slugs, counts, in_fence = set(), {}, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                in_fence = not in_fence
                continue
            m = None if in_fence else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(m.group(2))
                n = counts.get(s, 0)
                counts[s] = n + 1
                slugs.add(s if n == 0 else f"{s}-{n}")
    return slugs


def load_metrics(path):
    with open(path, encoding="utf-8") as f:
        return {ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")}


def alert_rules(rules_path, tests_path, runbook, metrics_path):
    with open(rules_path, encoding="utf-8") as f:
        rules = yaml.safe_load(f)
    with open(tests_path, encoding="utf-8") as f:
        tests = yaml.safe_load(f)
    slugs = heading_slugs(runbook)
    known = load_metrics(metrics_path) | {"up"}
    fires, silent = set(), set()
    for t in tests.get("tests", []):
        for a in t.get("alert_rule_test", []):
            (fires if a.get("exp_alerts") else silent).add(a.get("alertname"))
    alerts = []
    for g in rules.get("groups", []):
        for r in g.get("rules", []):
            name = r.get("alert")
            if not name:
                continue
            alerts.append(name)
            where = f"{rules_path}: alert {name}"
            sev = (r.get("labels") or {}).get("severity")
            if sev not in SEVERITIES:
                bad(f"{where}: severity label is {sev!r}, expected one of {sorted(SEVERITIES)}")
            ann = r.get("annotations") or {}
            for key in ("summary", "description", "runbook_url"):
                if not str(ann.get(key, "")).strip():
                    bad(f"{where}: annotation {key} missing")
            url = ann.get("runbook_url", "")
            want = RUNBOOK_BASE + slug(f"Alert: {name}")
            if url and url != want:
                bad(f"{where}: runbook_url is {url!r}, expected {want!r}")
            if slug(f"Alert: {name}") not in slugs:
                bad(f"{where}: {runbook} has no heading '## Alert: {name}' (anchor #{slug('Alert: ' + name)})")
            for m in set(re.findall(r"\btunnelgate_[a-z0-9_]+", r.get("expr", ""))):
                if m not in known:
                    bad(f"{where}: metric {m} is not in {metrics_path}")
            if name not in fires:
                bad(f"{tests_path}: no test where {name} fires")
            if name not in silent:
                bad(f"{tests_path}: no test where {name} stays silent")
    if not alerts:
        bad(f"{rules_path}: no alerts")
    if len(set(alerts)) != len(alerts):
        bad(f"{rules_path}: duplicate alert names")
    return f"{len(alerts)} alerts: severity, annotations, runbook anchors, metric names and tests OK"


def doc_links(*paths):
    """Relative links of Markdown files: the file exists; an anchor names a heading."""
    checked = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        text = re.sub(r"(`+)(?:(?!\1).)+?\1", "", text)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            checked += 1
            file, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(resolved):
                bad(f"{path}: link ({target}): no such file")
            elif anchor and resolved.endswith(".md") and anchor not in heading_slugs(resolved):
                bad(f"{path}: link ({target}): no heading with that anchor")
    return f"{checked} relative links in {len(paths)} files resolve"


def container(dep, name="tunnelgate"):
    for c in dep["spec"]["template"]["spec"].get("containers", []):
        if c.get("name") == name:
            return c
    bad(f"Deployment {dep['metadata']['name']}: no container {name}")
    return {}


def manifests(rendered, outdir, rules_path, mode):
    with open(rendered, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d.get("kind"), []).append(d)
    core = [d for d in docs if d.get("kind") not in CRD_KINDS]
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "core.yaml"), "w", encoding="utf-8") as f:
        yaml.safe_dump_all(core, f, sort_keys=False)

    # PrometheusRule: the same groups as the source rules file.
    with open(rules_path, encoding="utf-8") as f:
        source = yaml.safe_load(f)
    prs = by_kind.get("PrometheusRule", [])
    if len(prs) != 1:
        bad(f"{rendered}: expected one PrometheusRule, found {len(prs)}")
    else:
        groups = prs[0].get("spec", {}).get("groups")
        if groups != source.get("groups"):
            bad(f"{rendered}: PrometheusRule groups differ from {rules_path}")
        with open(os.path.join(outdir, "prometheusrule.rules.yml"), "w", encoding="utf-8") as f:
            yaml.safe_dump({"groups": groups}, f, sort_keys=False)

    # Service and ServiceMonitor: the monitor selects the Service and scrapes a port it has.
    svcs = by_kind.get("Service", [])
    sms = by_kind.get("ServiceMonitor", [])
    if len(svcs) != 1 or len(sms) != 1:
        bad(f"{rendered}: expected one Service and one ServiceMonitor, found {len(svcs)} and {len(sms)}")
    else:
        svc, sm = svcs[0], sms[0]
        sel = sm["spec"].get("selector", {}).get("matchLabels", {})
        labels = svc["metadata"].get("labels", {})
        if not sel or any(labels.get(k) != v for k, v in sel.items()):
            bad(f"{rendered}: ServiceMonitor selector {sel} does not match the Service labels {labels}")
        ports = {p.get("name"): p for p in svc["spec"].get("ports", [])}
        for ep in sm["spec"].get("endpoints", []):
            if ep.get("port") not in ports:
                bad(f"{rendered}: ServiceMonitor endpoint port {ep.get('port')!r} is not a Service port")
            if ep.get("path", "/metrics") != "/metrics":
                bad(f"{rendered}: ServiceMonitor path is {ep.get('path')!r}")
        job_label = sm["spec"].get("jobLabel")
        job = labels.get(job_label) if job_label else svc["metadata"]["name"]
        if job != "tunnelgate":
            bad(f"{rendered}: the scrape job would be {job!r}; the alert rules expect 'tunnelgate'")
        if not svc["spec"].get("publishNotReadyAddresses"):
            bad(f"{rendered}: Service must publish not-ready addresses (a latched gateway is not ready but must be scraped)")

    # Grafana dashboard ConfigMap.
    dash = [d for d in by_kind.get("ConfigMap", [])
            if d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    if len(dash) != 1 or "tunnelgate.json" not in dash[0].get("data", {}):
        bad(f"{rendered}: expected one ConfigMap labelled grafana_dashboard: \"1\" with tunnelgate.json")

    # Deployment.
    deps = by_kind.get("Deployment", [])
    if len(deps) != 1:
        bad(f"{rendered}: expected one Deployment, found {len(deps)}")
        return f"{len(docs)} documents"
    dep = deps[0]
    pod = dep["spec"]["template"]["spec"]
    c = container(dep)
    psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
    if not (psc.get("runAsNonRoot") or csc.get("runAsNonRoot")):
        bad(f"{rendered}: runAsNonRoot not set")
    if not csc.get("readOnlyRootFilesystem"):
        bad(f"{rendered}: readOnlyRootFilesystem not set")
    if csc.get("allowPrivilegeEscalation") is not False:
        bad(f"{rendered}: allowPrivilegeEscalation is not false")
    if csc.get("capabilities", {}).get("drop") != ["ALL"]:
        bad(f"{rendered}: capabilities do not drop ALL")
    if (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        bad(f"{rendered}: seccompProfile is not RuntimeDefault")
    if not c.get("resources", {}).get("requests") or not c.get("resources", {}).get("limits"):
        bad(f"{rendered}: resources requests/limits missing")
    named_ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    # strict-ha: a standby's /readyz is 503 by design; as the readiness probe it would
    # stall every rolling update and every drain (see its deployment patch).
    ready_path = "/livez" if mode == "strict-ha" else "/readyz"
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", ready_path)):
        get = c.get(probe, {}).get("httpGet", {})
        port = get.get("port")
        port = named_ports.get(port, port)
        if get.get("path") != path or port != OPS_PORT:
            bad(f"{rendered}: {probe} is not httpGet {path} on port {OPS_PORT}: {get}")
    env = {e["name"]: e for e in c.get("env", [])}
    ref = env.get("CONTROL_PLANE_API_KEY", {}).get("valueFrom", {}).get("secretKeyRef")
    if not ref:
        bad(f"{rendered}: CONTROL_PLANE_API_KEY does not come from a Secret")
    args = c.get("args", [])
    if args[:2] != ["run", "--config"] or len(args) < 3:
        bad(f"{rendered}: args are {args}, expected run --config PATH")
        return f"{len(docs)} documents"
    config_path = args[2]
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    cm_mount = mounts.get(os.path.dirname(config_path))
    cm_name = volumes.get((cm_mount or {}).get("name"), {}).get("configMap", {}).get("name")
    cms = {d["metadata"]["name"]: d for d in by_kind.get("ConfigMap", [])}
    text = cms.get(cm_name, {}).get("data", {}).get(os.path.basename(config_path))
    if text is None:
        bad(f"{rendered}: {config_path} is not a file of a mounted ConfigMap")
        return f"{len(docs)} documents"
    try:
        cfg = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        bad(f"{rendered}: {config_path} is not valid TOML: {e}")
        return f"{len(docs)} documents"
    if cfg.get("control_plane", {}).get("api_key") != "env:CONTROL_PLANE_API_KEY":
        bad(f"{rendered}: config api_key is not env:CONTROL_PLANE_API_KEY")
    ops = cfg.get("ops", {})
    if ops.get("listen") != f"0.0.0.0:{OPS_PORT}" or ops.get("allow_remote") is not True:
        bad(f"{rendered}: config ops must be listen = \"0.0.0.0:{OPS_PORT}\", allow_remote = true (probes, scrapes)")

    strict = cfg.get("strict", {})
    if mode == "base":
        if strict.get("enabled"):
            bad(f"{rendered}: the base must run default mode (strict.enabled is set)")
        if cfg.get("coordination", {}).get("backend", "none") != "none":
            bad(f"{rendered}: the base must run without coordination")
    else:
        strict_keys(rendered, cfg, c)
        if mode == "strict":
            single_replica(rendered, dep, strict, mounts, volumes, by_kind)
        else:
            across_replicas(rendered, dep, cfg, c, mounts, volumes, by_kind)
    return f"{len(docs)} documents; {len(core)} core for kubernetes-validate; {mode} invariants checked"


def strict_keys(rendered, cfg, c):
    """What every strict render has: the keys, and the fatal one-liner as the termination
    message."""
    strict = cfg.get("strict", {})
    if strict.get("enabled") is not True:
        bad(f"{rendered}: strict.enabled is not true")
    if cfg.get("mcp", {}).get("max_concurrent") != 1:
        bad(f"{rendered}: mcp.max_concurrent is not 1")
    if strict.get("latched_start") != "hold":
        bad(f"{rendered}: strict.latched_start is not \"hold\"")
    if c.get("terminationMessagePath") != "/dev/termination-log" \
            or c.get("terminationMessagePolicy") != "FallbackToLogsOnError":
        bad(f"{rendered}: termination message must be /dev/termination-log with FallbackToLogsOnError")


def latch_volume(rendered, strict, mounts, volumes):
    """The volume strict.latch_file is on (a writable mount), or {}."""
    latch = strict.get("latch_file", "/var/lib/tunnelgate/latch.json")
    lm = mounts.get(os.path.dirname(latch))
    if not lm:
        bad(f"{rendered}: strict.latch_file {latch}: its directory is not a volume mount")
        return {}
    if lm.get("readOnly"):
        bad(f"{rendered}: the latch volume is mounted read-only")
    return volumes.get(lm.get("name"), {})


def single_replica(rendered, dep, strict, mounts, volumes, by_kind):
    """overlays/strict: one replica, Recreate, the latch file on a PersistentVolumeClaim."""
    if dep["spec"].get("replicas") != 1:
        bad(f"{rendered}: strict mode needs replicas: 1, found {dep['spec'].get('replicas')}")
    if dep["spec"].get("strategy", {}).get("type") != "Recreate":
        bad(f"{rendered}: strict mode needs strategy Recreate")
    claim = latch_volume(rendered, strict, mounts, volumes).get("persistentVolumeClaim", {}).get("claimName")
    if not claim or claim not in {d["metadata"]["name"] for d in by_kind.get("PersistentVolumeClaim", [])}:
        bad(f"{rendered}: strict.latch_file is not on a PersistentVolumeClaim of this render")


def across_replicas(rendered, dep, cfg, c, mounts, volumes, by_kind):
    """overlays/strict-ha: strict mode across replicas, coordinated through etcd."""
    spec = dep["spec"]
    pod_labels = spec["template"].get("metadata", {}).get("labels", {})
    matches = lambda sel: bool(sel) and all(pod_labels.get(k) == v for k, v in sel.items())
    if spec.get("replicas") != 2:
        bad(f"{rendered}: strict-ha needs replicas: 2, found {spec.get('replicas')}")
    strategy = spec.get("strategy", {})
    if strategy.get("type") != "RollingUpdate" or strategy.get("rollingUpdate") != {"maxUnavailable": 0, "maxSurge": 1}:
        bad(f"{rendered}: strict-ha needs RollingUpdate with maxUnavailable 0, maxSurge 1: {strategy}")
    pdbs = by_kind.get("PodDisruptionBudget", [])
    if len(pdbs) != 1 or pdbs[0]["spec"].get("minAvailable") != 1 \
            or not matches(pdbs[0]["spec"].get("selector", {}).get("matchLabels", {})):
        bad(f"{rendered}: expected one PodDisruptionBudget, minAvailable 1, selecting the pods")
    terms = (spec["template"]["spec"].get("affinity", {}).get("podAntiAffinity", {})
             .get("requiredDuringSchedulingIgnoredDuringExecution", []))
    if not any(t.get("topologyKey") == "kubernetes.io/hostname"
               and matches(t.get("labelSelector", {}).get("matchLabels", {})) for t in terms):
        bad(f"{rendered}: no required pod anti-affinity on kubernetes.io/hostname selecting the pods")
    if by_kind.get("PersistentVolumeClaim"):
        bad(f"{rendered}: strict-ha has no PersistentVolumeClaim (the latch lives in etcd)")
    if "emptyDir" not in latch_volume(rendered, cfg.get("strict", {}), mounts, volumes):
        bad(f"{rendered}: strict.latch_file is not on an emptyDir volume")
    coord = cfg.get("coordination", {})
    etcd = coord.get("etcd", {})
    if coord.get("backend") != "etcd":
        bad(f"{rendered}: coordination.backend is not \"etcd\"")
    env = {e["name"]: e for e in c.get("env", [])}
    from_secret = lambda name: bool(env.get(name, {}).get("valueFrom", {}).get("secretKeyRef"))
    if "endpoints" in etcd or not from_secret("TUNNELGATE_COORDINATION__ETCD__ENDPOINTS"):
        bad(f"{rendered}: the etcd endpoints must come from a Secret (TUNNELGATE_COORDINATION__ETCD__ENDPOINTS), not config.toml")
    for key in ("username", "password"):
        ref = str(etcd.get(key, ""))
        if ref.startswith("env:") and from_secret(ref[4:]):
            continue
        if ref.startswith("file:") and "secret" in volumes.get(mounts.get(os.path.dirname(ref[5:]), {}).get("name"), {}):
            continue
        bad(f"{rendered}: coordination.etcd.{key} is not an env: or file: reference to a Secret: {ref!r}")
    ca = etcd.get("tls", {}).get("ca_file")
    if ca and not {"secret", "configMap"} & set(volumes.get(mounts.get(os.path.dirname(ca), {}).get("name"), {})):
        bad(f"{rendered}: coordination.etcd.tls.ca_file {ca} is not on a mounted Secret or ConfigMap")


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "alert-rules" and len(args) == 4:
        summary = alert_rules(*args)
    elif cmd == "doc-links" and args:
        summary = doc_links(*args)
    elif cmd == "manifests" and len(args) == 4 and args[3] in ("base", "strict", "strict-ha"):
        summary = manifests(*args)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for p in problems:
        print(f"check-ops.py {cmd}: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"check-ops.py {cmd}: OK ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
