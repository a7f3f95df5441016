#!/usr/bin/env python3
"""Structural check of the Grafana dashboard (Python stdlib only; Grafana is in no registry).

Usage: scripts/check-dashboard.py [DASHBOARD_JSON] [--metrics FILE] [--promtool PATH]

Checks that the dashboard
  - is valid JSON with a stable uid ("tunnelgate") and a title;
  - has the template variables `datasource` (type datasource, query prometheus), `job` and
    `instance` (label_values queries);
  - has unique panel ids (rows and nested panels included) and a gridPos on every panel;
  - points every panel and target at the `${datasource}` variable;
  - gives every target a non-empty expr, whose every series selector filters on
    job=~"$job" and instance=~"$instance";
  - uses only metric names listed in dashboards/metrics.txt (plus Prometheus's own `up`);
  - has the panels docs/observability.md names (REQUIRED_PANELS), and table panels whose targets are
    instant queries formatted as tables (one row per series);
  - has expressions that parse: each one, with Grafana's variables substituted, is written
    into a throwaway rules file as a recording rule and checked by `promtool check rules`
    (promtool 2.42 has no parse-only command).
Exit 0 when all hold; otherwise 1, with one line per problem.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UID = "tunnelgate"
# Panels docs/observability.md ("Reconciliation panels") and docs/runbook.md send operators to.
REQUIRED_PANELS = [
    "Delivery receipts written and dropped",
    "Time since last success, per channel",
    "Channels without a success yet",
    "Non-acked deliveries in range, by kind and outcome",
    "Abandoned legs in range, by transport",
]
# Series Prometheus itself adds to every scraped target.
SYNTHETIC = {"up"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
            "unless", "bool", "offset", "atan2", "inf", "nan"}
# Aggregation operators may take their by/without clause before the parenthesis.
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                "bottomk", "topk", "quantile"}
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
JOB_MATCHER = re.compile(r'\bjob\s*=~\s*"\$job"')
INSTANCE_MATCHER = re.compile(r'\binstance\s*=~\s*"\$instance"')
# Grafana's variables, replaced by plausible values before promtool parses the expression.
GRAFANA_VARS = [
    ("$__rate_interval", "5m"), ("${__rate_interval}", "5m"),
    ("$__interval", "1m"), ("${__interval}", "1m"),
    ("$__range", "6h"), ("${__range}", "6h"),
    ("${job}", ".+"), ("$job", ".+"), ("${instance}", ".+"), ("$instance", ".+"),
]


def selectors(expr):
    """(metric name, label matcher text or None) for every series selector in a PromQL expr.

    A small scanner, enough for the dashboard: skips string literals, label lists after
    by/without/on/ignoring/group_*, range and subquery brackets, numbers and durations,
    function names (an identifier followed by "("), aggregation operators and keywords.
    """
    out = []
    i, n = 0, len(expr)
    while i < n:
        c = expr[i]
        if c in "\"'`":
            j = i + 1
            while j < n and expr[j] != c:
                j += 2 if expr[j] == "\\" else 1
            i = j + 1
            continue
        if c == "#":  # comment to end of line
            j = expr.find("\n", i)
            i = n if j < 0 else j
            continue
        if c == "[":
            i = expr.index("]", i) + 1
            continue
        if c == "{":  # a bare {..} selector (no metric name)
            j = expr.index("}", i)
            out.append((None, expr[i + 1:j]))
            i = j + 1
            continue
        if c.isdigit() or (c == "." and i + 1 < n and expr[i + 1].isdigit()):
            j = i
            while j < n and (expr[j].isalnum() or expr[j] in "._"):
                j += 1
            i = j
            continue
        m = re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", expr[i:])
        if m:
            word = m.group(0)
            j = i + len(word)
            k = j
            while k < n and expr[k].isspace():
                k += 1
            if word.lower() in LABEL_LIST_KEYWORDS and k < n and expr[k] == "(":
                i = expr.index(")", k) + 1
                continue
            if word.lower() in KEYWORDS or word in AGGREGATIONS or (k < n and expr[k] == "("):
                i = j
                continue
            if k < n and expr[k] == "{":
                end = expr.index("}", k)
                out.append((word, expr[k + 1:end]))
                i = end + 1
            else:
                out.append((word, None))
                i = j
            continue
        i += 1
    return out


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


def main(argv):
    args = list(argv)
    metrics_file = os.path.join(ROOT, "dashboards", "metrics.txt")
    promtool = shutil.which("promtool")
    dash_file = os.path.join(ROOT, "dashboards", "tunnelgate.json")
    while args:
        a = args.pop(0)
        if a == "--metrics":
            metrics_file = args.pop(0)
        elif a == "--promtool":
            promtool = args.pop(0)
        elif a.startswith("-"):
            print(f"check-dashboard: unknown option {a}", file=sys.stderr)
            return 2
        else:
            dash_file = a
    problems = []

    def bad(msg):
        problems.append(msg)

    try:
        with open(dash_file, encoding="utf-8") as f:
            dash = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        print(f"check-dashboard: {dash_file}: not valid JSON: {e}", file=sys.stderr)
        return 1
    with open(metrics_file, encoding="utf-8") as f:
        known = {ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")}

    if dash.get("uid") != UID:
        bad(f'uid is {dash.get("uid")!r}, expected {UID!r}')
    if not dash.get("title"):
        bad("title missing")

    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        bad("template variable `datasource` missing or not {type: datasource, query: prometheus}")
    for name in ("job", "instance"):
        v = variables.get(name)
        if not v:
            bad(f"template variable `{name}` missing")
            continue
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        if v.get("type") != "query" or not re.match(rf"label_values\(.*,\s*{name}\s*\)$", q):
            bad(f"template variable `{name}` is not a label_values(..., {name}) query: {q!r}")
        if (v.get("datasource") or {}).get("uid") != "${datasource}":
            bad(f"template variable `{name}` does not use the ${{datasource}} variable")

    seen_ids = {}
    exprs = []
    for p in walk_panels(dash.get("panels", [])):
        pid = p.get("id")
        title = p.get("title", "?")
        where = f"panel {pid} ({title!r})"
        if not isinstance(pid, int):
            bad(f"{where}: id missing or not an integer")
        elif pid in seen_ids:
            bad(f"{where}: id {pid} also used by panel {seen_ids[pid]!r}")
        else:
            seen_ids[pid] = title
        if "gridPos" not in p:
            bad(f"{where}: gridPos missing")
        if p.get("type") == "row":
            continue
        if (p.get("datasource") or {}).get("uid") != "${datasource}":
            bad(f"{where}: datasource is not the ${{datasource}} variable")
        targets = p.get("targets") or []
        if not targets:
            bad(f"{where}: no targets")
        if p.get("type") == "table":
            for t in targets:
                if t.get("instant") is not True or t.get("format") != "table":
                    bad(f"{where} target {t.get('refId', '?')}: a table's target must be instant, format table")
        for t in targets:
            tw = f"{where} target {t.get('refId', '?')}"
            expr = (t.get("expr") or "").strip()
            if not expr:
                bad(f"{tw}: empty expr")
                continue
            if (t.get("datasource") or {}).get("uid") not in (None, "${datasource}"):
                bad(f"{tw}: datasource is not the ${{datasource}} variable")
            exprs.append((tw, expr))
            sels = selectors(expr)
            if not sels:
                bad(f"{tw}: no series selector found in {expr!r}")
            for name, matchers in sels:
                if name is None:
                    bad(f"{tw}: selector without a metric name: {{{matchers}}}")
                elif name not in known and name not in SYNTHETIC:
                    bad(f"{tw}: metric {name!r} is not in {os.path.relpath(metrics_file, ROOT)}")
                if not matchers or not JOB_MATCHER.search(matchers) or not INSTANCE_MATCHER.search(matchers):
                    bad(f'{tw}: selector {name} is not filtered by job=~"$job", instance=~"$instance"')

    if not exprs:
        bad("no expressions found")
    titles = {p.get("title") for p in walk_panels(dash.get("panels", []))}
    for title in REQUIRED_PANELS:
        if title not in titles:
            bad(f"panel {title!r} missing (docs/observability.md names it)")

    # Parse every expression with promtool, as recording rules in a throwaway file.
    if promtool is None:
        bad("promtool not found (scripts/install-peers installs it): expressions not parsed")
    elif exprs:
        with tempfile.TemporaryDirectory() as tmp:
            for idx, (tw, expr) in enumerate(exprs):
                sub = expr
                for var, val in GRAFANA_VARS:
                    sub = sub.replace(var, val)
                if "$" in sub:
                    bad(f"{tw}: unknown Grafana variable left in {expr!r}")
                    continue
                rules = os.path.join(tmp, f"expr{idx}.rules.json")
                # JSON is YAML: no YAML library needed.
                doc = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:expr{idx}", "expr": sub}]}]}
                with open(rules, "w", encoding="utf-8") as f:
                    json.dump(doc, f)
                r = subprocess.run([promtool, "check", "rules", rules], capture_output=True, text=True)
                if r.returncode != 0:
                    msg = " ".join((r.stdout + r.stderr).split())
                    bad(f"{tw}: promtool rejects {sub!r}: {msg}")

    for p in problems:
        print(f"check-dashboard: {os.path.relpath(dash_file)}: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"check-dashboard: {os.path.relpath(dash_file)}: OK ({len(seen_ids)} panels, {len(exprs)} expressions "
          "parsed by promtool, metric names known, every selector filtered by $job and $instance)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
