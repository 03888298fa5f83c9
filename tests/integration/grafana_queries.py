#!/usr/bin/env python3
"""Checks deploy/grafana/skytrain-dashboard.json, and each of its panel queries against a real
Prometheus.

  grafana_queries.py --check-only [DASHBOARD]
      Offline: the JSON is well-formed, panel ids are unique, every panel has a position and
      queries through the dashboard's datasource variable, every query names a skytrain_ or
      process_ metric (one that the daemon's /metrics sources export, when the source tree is there),
      and uses only the dashboard's variables and Grafana's built-in ones.

  grafana_queries.py PROMETHEUS_URL [--dashboard FILE] [--var NAME=VALUE ...] [--wait SECONDS]
      The offline checks, then every panel target's expr with its variables substituted
      ($job_id, ${job_id}, ${job_id:regex}, [[job_id]]; a variable not given with --var
      becomes ".*"; $__rate_interval and $__interval become 1m, $__range 5m) through
      PROMETHEUS_URL/api/v1/query, and each query variable's label_values() through
      /api/v1/label/<label>/values. Fails on a query Prometheus refuses, and on one whose
      result stays empty for --wait seconds (default 30, all queries together), unless it is
      in ALLOW_EMPTY below. Prints one line per query with its number of series.

Exit status: 0 when every check passed, 1 otherwise (each failure printed with the expr and
Prometheus's reply), 2 on bad arguments. Python 3 standard library only.
"""
import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DASHBOARD = os.path.join(HERE, "..", "..", "deploy", "grafana", "skytrain-dashboard.json")
# The sources of /metrics: the server's own family and the collectors skytraind gives it.
METRICS_SOURCES = [os.path.join(HERE, "..", "..", "daemon", *parts) for parts in (
    ("ops", "metrics_server.cpp"), ("jobs", "job_collector.cpp"), ("net", "refusal_metrics.cpp"))]

# Targets ("<panel title>/<refId>") whose result may be empty in prometheus_test.sh's run,
# each with the reason. Empty on purpose: in that run (a finished two-stage job with eval
# and its final checkpoint) every panel has data, so every panel must return series:
# - "Refusals by reason": skytraind exports skytrain_refused_total for all four reasons
#   from its start, at 0 when nothing was refused, so the rate is 0, not empty.
# - "Restarts in range": skytrain_job_restarts_total exists from the job's creation, so the
#   increase is 0, not empty.
# - "Checkpoint age": absent only until a job's first checkpoint completes; a finished
#   job's last one is confirmed before its stages report done.
# An entry naming no target of the dashboard is itself an error (a stale allow-list).
ALLOW_EMPTY = {
    # "Panel title/A": "why this query may legitimately return nothing",
}

# Grafana's built-in variables, as a test substitutes them.
BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "5m",
    "__range_s": "300",
    "__range_ms": "300000",
}
# $name, ${name}, ${name:format}, [[name]], [[name:format]]
VARIABLE = re.compile(r"\$\{(\w+)(?::[\w-]+)?\}|\[\[(\w+)(?::[\w-]+)?\]\]|\$(\w+)")
METRIC = re.compile(r"\b((?:skytrain|process)_[a-zA-Z0-9_]+)\b")
LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*)?([a-zA-Z_]\w*)\s*\)\s*$")


def walk_panels(panels):
    """Every panel, the panels of rows (collapsed or not) included."""
    for panel in panels:
        yield panel
        yield from walk_panels(panel.get("panels", []))


def targets(dashboard):
    """(panel, target) for every panel target with an expr."""
    for panel in walk_panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            yield panel, target


def target_key(panel, target):
    return f"{panel.get('title', '?')}/{target.get('refId', '?')}"


def variable_query(variable):
    query = variable.get("query", "")
    if isinstance(query, dict):
        query = query.get("query", "")
    return query if isinstance(query, str) else ""


def known_metrics():
    """The metric names the METRICS_SOURCES export, or None without the source tree."""
    names = set()
    try:
        for path in METRICS_SOURCES:
            with open(path, encoding="utf-8") as f:
                names |= set(re.findall(r'"((?:skytrain|process)_[a-z0-9_]+)"', f.read()))
    except OSError:
        return None
    return names


def check_dashboard(path):
    """Loads and checks the dashboard offline; returns (dashboard, errors)."""
    try:
        with open(path, encoding="utf-8") as f:
            dashboard = json.load(f)
    except (OSError, ValueError) as e:
        return None, [f"{path}: not a readable JSON file: {e}"]
    errors = []
    if not isinstance(dashboard, dict):
        return None, [f"{path}: not a JSON object"]
    for key in ("title", "uid", "schemaVersion", "panels", "templating"):
        if key not in dashboard:
            errors.append(f"dashboard has no {key!r}")
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    datasources = [name for name, v in variables.items() if v.get("type") == "datasource"]
    if len(datasources) != 1 or variables[datasources[0]].get("query") != "prometheus":
        errors.append("the dashboard needs exactly one datasource variable of type prometheus")
    datasource_uid = "${%s}" % datasources[0] if datasources else None
    metrics = known_metrics()

    def check_expr(where, expr):
        if not isinstance(expr, str) or not expr.strip():
            errors.append(f"{where}: no expr")
            return
        names = set(METRIC.findall(expr))
        if not names:
            errors.append(f"{where}: {expr!r} names no skytrain_ or process_ metric")
        if metrics is not None:
            for name in sorted(names - metrics):
                errors.append(f"{where}: {name} is not exported by skytraind's /metrics sources")
        for match in VARIABLE.finditer(expr):
            name = next(g for g in match.groups() if g)
            if name not in variables and name not in BUILTINS:
                errors.append(f"{where}: {expr!r} uses ${name}, which the dashboard does not define")

    ids = {}
    for panel in walk_panels(dashboard.get("panels", [])):
        title = panel.get("title", "?")
        pid = panel.get("id")
        if not isinstance(pid, int):
            errors.append(f"panel {title!r} has no integer id")
        elif pid in ids:
            errors.append(f"panels {ids[pid]!r} and {title!r} share id {pid}")
        else:
            ids[pid] = title
        grid = panel.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in ("h", "w", "x", "y")) or grid.get("x", 0) + grid.get("w", 0) > 24:
            errors.append(f"panel {title!r} has no valid gridPos")
        if panel.get("type") == "row":
            continue
        if not panel.get("targets"):
            errors.append(f"panel {title!r} has no targets")
        for where_ds in [panel.get("datasource")] + [t.get("datasource") for t in panel.get("targets", [])]:
            if where_ds is not None and (not isinstance(where_ds, dict) or where_ds.get("uid") != datasource_uid):
                errors.append(f"panel {title!r} does not query through {datasource_uid}: {where_ds}")
    refs = set()
    for panel, target in targets(dashboard):
        key = target_key(panel, target)
        if key in refs:
            errors.append(f"two targets are called {key!r}")
        refs.add(key)
        check_expr(f"panel {key}", target.get("expr"))
    for key in ALLOW_EMPTY:
        if key not in refs:
            errors.append(f"ALLOW_EMPTY names {key!r}, which is no target of the dashboard")
    for name, variable in variables.items():
        if variable.get("type") != "query":
            continue
        query = variable_query(variable)
        if not LABEL_VALUES.match(query):
            errors.append(f"variable {name}: {query!r} is not label_values(metric, label)")
        check_expr(f"variable {name}", query)
    return dashboard, errors


def substitute(expr, values):
    def replace(match):
        name = next(g for g in match.groups() if g)
        if name in BUILTINS:
            return BUILTINS[name]
        return values.get(name, ".*")
    return VARIABLE.sub(replace, expr)


def get(base, path, params):
    """(reply JSON or None, reply text) of a GET on the Prometheus API."""
    url = base.rstrip("/") + path + "?" + urllib.parse.urlencode(params, doseq=True)
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:  # a refused query: 400 or 422 with an error body
        text = e.read().decode("utf-8", "replace")
    except (OSError, ValueError) as e:
        return None, f"{url}: {e}"
    try:
        return json.loads(text), text
    except ValueError:
        return None, text


def run_queries(base, dashboard, values, wait):
    """Queries every target and variable; returns the failures."""
    queries = []  # (label, kind, what, allowed_reason)
    for panel, target in targets(dashboard):
        key = target_key(panel, target)
        queries.append((key, "query", substitute(target["expr"], values), ALLOW_EMPTY.get(key)))
    for variable in dashboard["templating"]["list"]:
        if variable.get("type") == "query":
            queries.append((f"variable {variable['name']}", "label", variable_query(variable), None))
    deadline = time.monotonic() + wait
    failures = []
    for label, kind, what, allowed in queries:
        while True:
            if kind == "query":
                reply, text = get(base, "/api/v1/query", {"query": what})
            else:
                metric, name = LABEL_VALUES.match(what).groups()
                reply, text = get(base, f"/api/v1/label/{name}/values", {"match[]": metric} if metric else {})
            if not isinstance(reply, dict) or reply.get("status") != "success":
                count = None
                break
            data = reply.get("data")
            if isinstance(data, list):  # label values
                count = len(data)
            elif isinstance(data, dict) and data.get("resultType") in ("vector", "matrix"):
                count = len(data.get("result") or [])
            else:  # a scalar or a string: one value
                count = 1
            if count or allowed or time.monotonic() >= deadline:
                break
            time.sleep(1)  # scrapes come every few seconds: give an empty result a little time
        if count is None:
            failures.append(f"{label}: query failed: {what}\n  reply: {text[:2000]}")
            print(f"FAIL  {label}: query failed: {what}")
        elif count == 0 and not allowed:
            failures.append(f"{label}: no series for {what}\n  reply: {text[:2000]}")
            print(f"FAIL  {label}: 0 series: {what}")
        else:
            note = f" (allowed to be empty: {allowed})" if count == 0 else ""
            print(f"ok    {label}: {count} series{note}: {what}")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prometheus", nargs="?", help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    parser.add_argument("--check-only", nargs="?", const=DEFAULT_DASHBOARD, metavar="FILE",
                        help="only the offline checks of FILE (default: the repository's dashboard)")
    parser.add_argument("--dashboard", default=DEFAULT_DASHBOARD, help="the dashboard JSON to query")
    parser.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                        help="a template variable's value (a regex), e.g. job_id=0123abcd; others are .*")
    parser.add_argument("--wait", type=float, default=30, help="seconds, over all queries, to wait for empty results")
    args = parser.parse_args()
    if (args.check_only is None) == (args.prometheus is None):
        parser.error("give either PROMETHEUS_URL or --check-only [FILE]")
    values = {}
    for item in args.var:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--var {item!r} is not NAME=VALUE")
        values[name] = value

    path = args.check_only or args.dashboard
    dashboard, errors = check_dashboard(path)
    for error in errors:
        print(f"FAIL  {error}")
    if errors:
        return 1
    count = sum(1 for _ in targets(dashboard))
    if known_metrics() is None:
        print(f"note: {', '.join(METRICS_SOURCES)} not found; metric names not checked against the source")
    print(f"ok    {path}: {count} panel queries well-formed")
    if args.check_only is not None:
        return 0
    failures = run_queries(args.prometheus, dashboard, values, args.wait)
    if failures:
        print(f"FAIL: {len(failures)} dashboard quer{'y' if len(failures) == 1 else 'ies'} failed:", file=sys.stderr)
        for failure in failures:
            print(failure, file=sys.stderr)
        return 1
    print(f"ok    every dashboard query returned series from {args.prometheus}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
