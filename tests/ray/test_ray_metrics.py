"""The Grafana dashboard's Ray panels read series a real Ray head exports (on the port KubeRay scrapes as
`metrics`): each ray_* metric a panel queries is in the head's scrape with the labels the panel groups by,
or, for the GPU gauges a node without a GPU cannot export, defined by Ray's reporter agent with those
labels."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from ray.dashboard.modules.reporter.reporter_agent import GPU_TAG_KEYS, METRICS_GAUGES
from ray_testlib import LocalRay

DASHBOARD = Path(__file__).resolve().parents[2] / "charts/miles/dashboards/miles-run.json"
# Ray reports node metrics every few seconds and the raylet's every ~10 s: a bound for a hang only
SCRAPE_SECONDS = 180.0
# labels that Prometheus adds to every scraped series (from the PodMonitor's target), not Ray
TARGET_LABELS = {"pod", "job", "namespace", "instance", "container", "endpoint"}


def ray_queries() -> dict[str, set[str]]:
    """Each ray_* metric the dashboard queries, with the labels its queries group or filter by."""
    found: dict[str, set[str]] = {}
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, selector in re.findall(r"(ray_[a-z_]+)\{([^}]*)\}", expr):
                labels = found.setdefault(name, set())
                labels |= {m for m in re.findall(r"([A-Za-z_]+)=", selector)}
                for group in re.findall(r"by \(([^)]*)\)", expr):
                    labels |= {g.strip() for g in group.split(",")}
    return {name: labels - TARGET_LABELS for name, labels in found.items()}


def scrape(url: str) -> dict[str, set[str]]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    return series


def test_the_dashboards_ray_queries_match_what_ray_exports(local_ray: LocalRay) -> None:
    queries = ray_queries()
    assert {"ray_node_gpus_utilization", "ray_object_store_memory", "ray_node_cpu_utilization"} <= set(
        queries
    )
    gpu_only = {
        f"ray_{name}"
        for name, gauge in METRICS_GAUGES.items()
        if name.startswith(("node_gpus_", "node_gram_"))
    }
    expected = set(queries) - gpu_only
    deadline = time.monotonic() + SCRAPE_SECONDS
    while True:
        exported = scrape(local_ray.metrics_url)
        if expected <= set(exported) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    missing = sorted(expected - set(exported))
    assert not missing, f"queried by the dashboard, not exported by the Ray head: {missing}"
    for name in sorted(expected):
        unknown = sorted(queries[name] - exported[name])
        assert not unknown, f"{name}: labels {unknown} not exported (has {sorted(exported[name])})"
    for name in sorted(set(queries) & gpu_only):
        assert name.removeprefix("ray_") in METRICS_GAUGES, name
        unknown = sorted(queries[name] - set(GPU_TAG_KEYS))
        assert not unknown, f"{name}: labels {unknown} are not among Ray's GPU tags {GPU_TAG_KEYS}"
