#!/usr/bin/env python3
"""Testbed benchmarks (issue 5): writes tests/bench/results/testbed.{json,md}.

1. colocated scenario on 2 simulated GPU nodes, converted checkpoint already present: time from `helm install`
   to the Ray job submitted, and each hook's share (from the pod runner's journal);
2. disaggregated run on 128 simulated GPU nodes (1024 GPUs: 64 actor nodes + 512 rollout GPUs = 128 workers):
   the same figures. There, every worker pod is only simulated (MAX_RAY_WORKERS=0: 128 local raylets do not
   fit this machine), so verify is off and the submitted job stays PENDING (no `gpu_node` in its Ray);
   the figure is install -> job submitted, which is what the hooks guarantee;
3. API requests made by `wait-ready` at 2 and at 128 nodes (API server audit log, by the pod bound into the
   hook's service-account token) and its duration;
4. `helm template` time at 128 nodes (median of 5);
5. testbed up time at 2 and at 128 nodes.

Runs on a private testbed (CLUSTER_DIR=.tools/cluster-bench, ports +2000) that it brings up and down itself.
Usage: tests/bench/testbed/bench.py [--skip-128]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
os.environ.setdefault("TESTBED_PORT_OFFSET", "2000")
os.environ.setdefault("CLUSTER_DIR", str(REPO / ".tools" / "cluster-bench"))
os.environ.setdefault("FSX_DIR", "/tmp/miles-testbed-fsx-bench")
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import harness as tb  # noqa: E402
import seed  # noqa: E402

RESULTS = REPO / "tests" / "bench" / "results"
COLOCATED = [tb.OVERLAY, tb.VALUES / "values-colocated.yaml"]
DISAGGREGATED = [tb.OVERLAY, tb.VALUES / "values-disaggregated.yaml"]
AT_128 = [
    "--set",
    "topology.actorNodes=64",
    "--set",
    "topology.rolloutGpus=512",
    "--set",
    "hooks.verify.enabled=false",
]


def vargs(values: list[Path]) -> list[str]:
    out: list[str] = []
    for v in values:
        out += ["-f", str(v)]
    return out


def audit_requests(pod: str) -> dict[str, Any]:
    """Requests the pod made (its bound service-account token names it in every audit event). A request
    is one auditID: a watch is logged twice (stages ResponseStarted and ResponseComplete)."""
    path = tb.CLUSTER_DIR / "logs" / "audit.log"
    seen: set[str] = set()
    verbs: dict[str, int] = {}
    for line in path.read_text().splitlines():
        ev = json.loads(line)
        extra = (ev.get("user") or {}).get("extra") or {}
        if pod in extra.get("authentication.kubernetes.io/pod-name", []) and ev.get("auditID") not in seen:
            seen.add(str(ev.get("auditID")))
            key = f"{ev.get('verb')} {(ev.get('objectRef') or {}).get('resource', ev.get('requestURI'))}"
            verbs[key] = verbs.get(key, 0) + 1
    return {"requests": len(seen), "byVerbResource": dict(sorted(verbs.items()))}


def install(name: str, values: list[Path], extra: list[str], mirror: Path) -> dict[str, Any]:
    ns = f"bench-{name}"
    rel = "miles"
    tb.run([str(REPO / "testbed" / "storage.sh"), ns, "fsx-claim"])
    tb.kubectl("-n", ns, "create", "secret", "generic", "hf-token", "--from-literal=token=hf_testbed")
    tb.publish_converted(tb.rendered_spec(values, rel, ns, extra))
    t0 = time.time()
    res = tb.helm(
        "helm4",
        "install",
        rel,
        str(tb.CHART),
        "-n",
        ns,
        *vargs(values),
        *extra,
        "--wait",
        "--timeout",
        "15m",
        timeout=1000,
    )
    t1 = time.time()
    entries = sorted(tb.journal(ns, since=t0), key=lambda e: e["start"])
    hooks = []
    for e in entries:
        step = tb.hook_steps([e])
        hooks.append(
            {
                "pod": e["pod"],
                "container": e["container"],
                "step": step[0] if step else e["container"],
                "startOffset": round(e["start"] - t0, 2),
                "seconds": round(e["end"] - e["start"], 2),
                "exitCode": e["exitCode"],
            }
        )
    submit = [e for e in entries if tb.hook_steps([e]) == ["submit"]]
    submitted = (submit[-1]["end"] - t0) if submit else None
    wait_ready = [e for e in entries if tb.hook_steps([e]) == ["wait-ready"]]
    spec = tb.run_spec(ns, "miles")
    out = {
        "scenario": name,
        "workers": spec["topology"]["workerReplicas"],
        "clusterGpus": spec["topology"]["clusterGpus"],
        "helmInstallSeconds": round(t1 - t0, 2),
        "installToSubmittedSeconds": round(submitted, 2) if submitted else None,
        "hooks": hooks,
        "hookSecondsTotal": round(sum(h["seconds"] for h in hooks), 2),
        "waitReady": {
            "seconds": round(wait_ready[-1]["end"] - wait_ready[-1]["start"], 2),
            **audit_requests(wait_ready[-1]["pod"]),
        }
        if wait_ready
        else None,
        "jobs": [j["submission_id"] for j in tb.release_jobs(rel, ns)],
        "helmStderrTail": res.err[-300:],
    }
    tb.helm("helm4", "uninstall", rel, "-n", ns, "--wait", "--timeout", "5m", check=False)
    tb.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    return out


def template_seconds(values: list[Path], extra: list[str], n: int = 5) -> dict[str, Any]:
    times = []
    for _ in range(n):
        r = tb.helm("helm4", "template", "miles", str(tb.CHART), *vargs(values), *extra)
        times.append(r.seconds)
    return {"medianSeconds": round(statistics.median(times), 3), "runs": [round(t, 3) for t in times]}


def fresh_testbed(nodes: int, max_ray_workers: int) -> float:
    if tb.is_up():
        tb.down()
    os.environ["MAX_RAY_WORKERS"] = str(max_ray_workers)
    return tb.up(nodes)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-128", action="store_true", help="only the 2-node figures")
    args = ap.parse_args(argv)
    mirror = seed.seed(tb.FSX_DIR)
    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg": os.getloadavg(),
            "python": platform.python_version(),
        },
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        results["upSeconds2"] = fresh_testbed(2, 8)
        results["colocated2"] = install("colocated", COLOCATED, [], mirror)
        results["helmTemplate2"] = template_seconds(COLOCATED, [])
        if not args.skip_128:
            # 128 local raylets do not fit this machine: every worker pod is only simulated there
            results["upSeconds128"] = fresh_testbed(128, 0)
            results["disaggregated128"] = install("disagg128", DISAGGREGATED, AT_128, mirror)
            results["helmTemplate128"] = template_seconds(DISAGGREGATED, AT_128)
    finally:
        if tb.is_up():
            tb.down()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "testbed.json").write_text(json.dumps(results, indent=1) + "\n")
    (RESULTS / "testbed.md").write_text(render(results))
    print(render(results))
    return 0


def render(r: dict[str, Any]) -> str:
    lines = [
        "# Testbed benchmarks",
        "",
        f"Machine: {r['machine']['cpus']} CPUs, {r['machine']['platform']}, "
        f"load average at start {r['machine']['loadavg'][0]:.1f} (shared with other work); {r['date']}.",
        "",
    ]
    for key, title in (
        ("colocated2", "colocated, 2 GPU nodes"),
        ("disaggregated128", "disaggregated, 128 GPU nodes"),
    ):
        s = r.get(key)
        if not s:
            continue
        lines += [
            f"## {title}: {s['workers']} worker pods, {s['clusterGpus']} GPUs",
            "",
            f"- helm install → Ray job submitted: **{s['installToSubmittedSeconds']} s** "
            f"(helm install --wait returned after {s['helmInstallSeconds']} s)",
            f"- wait-ready: {s['waitReady']['seconds'] if s['waitReady'] else '-'} s, "
            f"{s['waitReady']['requests'] if s['waitReady'] else '-'} API requests",
            "",
            "| hook (container) | starts at (s) | runs (s) |",
            "|---|---|---|",
        ]
        lines += [
            f"| {h['step']} ({h['container']}) | {h['startOffset']} | {h['seconds']} |" for h in s["hooks"]
        ]
        lines.append("")
    for key, title in (
        ("helmTemplate2", "helm template, colocated"),
        ("helmTemplate128", "helm template, 128 nodes"),
    ):
        if key in r:
            lines.append(f"- {title}: median {r[key]['medianSeconds']} s")
    for key, title in (
        ("upSeconds2", "testbed up, 2 GPU nodes"),
        ("upSeconds128", "testbed up, 128 GPU nodes"),
    ):
        if key in r:
            lines.append(f"- {title}: {r[key]} s")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
