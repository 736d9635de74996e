"""The Grafana dashboard the chart ships (dashboards.enabled): rendered by both Helms into valid JSON whose
panels are laid out on Grafana's 24-column grid without overlapping, each read from the data source
variable, each reward_* series it queries exported by the real reward service with the labels it uses.
The ray_* series are checked against a real Ray head in tests/ray/test_ray_metrics.py."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from chartlib import CHART, HELMS, KUBE_VERSION, VALUES, run, tool
from miles_reward.metrics import Metrics
from prometheus_client.parser import text_string_to_metric_families


def render(helm: str) -> dict[str, Any]:
    cmd = [
        tool(helm),
        "template",
        "run-a",
        str(CHART),
        "--namespace",
        "team-rl",
        "--kube-version",
        KUBE_VERSION,
    ]
    res = run(
        [
            *cmd,
            "-f",
            str(VALUES / "values-colocated.yaml"),
            "--set",
            "dashboards.enabled=true",
            "--show-only",
            "templates/dashboards/configmap.yaml",
        ]
    )
    config_map = yaml.safe_load(res.stdout)
    return json.loads(config_map["data"]["miles-run.json"])


@pytest.fixture(scope="module", params=HELMS)
def dashboard(request: pytest.FixtureRequest) -> dict[str, Any]:
    return render(request.param)


def test_names_this_release_and_a_stable_uid(dashboard: dict[str, Any]) -> None:
    assert dashboard["title"] == "miles run: run-a (team-rl)"
    assert re.fullmatch(r"miles-[0-9a-f]{16}", dashboard["uid"])
    assert not re.search(r"__[A-Z_]+__", json.dumps(dashboard)), "a placeholder was left unreplaced"
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]


def test_panels_are_on_the_grid_without_overlap(dashboard: dict[str, Any]) -> None:
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), ids
    taken: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, f"{p['title']} overlaps another panel"
        taken |= cells


def test_every_query_reads_the_data_source_variable_and_this_releases_jobs(dashboard: dict[str, Any]) -> None:
    targets = [(p, t) for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]]
    assert targets
    for panel, target in targets:
        assert panel["datasource"]["uid"] == target["datasource"]["uid"] == "${datasource}", panel["title"]
        jobs = set(re.findall(r'job="([^"]*)"', target["expr"]))
        assert jobs and jobs <= {"team-rl/run-a-miles-ray", "team-rl/run-a-miles-reward"}, (
            panel["title"],
            jobs,
        )


def test_reward_queries_match_what_the_reward_service_exports(dashboard: dict[str, Any]) -> None:
    exported: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(Metrics("math_verify", 2, 64).render().decode()):
        for sample in family.samples:
            exported.setdefault(sample.name, set()).update(sample.labels)
    # histogram buckets appear in the exposition once observed; the family declares them
    exported.setdefault("reward_request_duration_seconds_bucket", {"endpoint", "le"})
    queried = 0
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            for name, selector in re.findall(r"(reward_[a-z_]+)\{([^}]*)\}", target["expr"]):
                queried += 1
                labels = set(re.findall(r"([A-Za-z_]+)=", selector)) - {"job"}
                for group in re.findall(r"by \(([^)]*)\)", target["expr"]):
                    labels |= {g.strip() for g in group.split(",")}
                assert name in exported, f"{panel['title']}: {name} is not exported by the reward service"
                assert labels <= exported[name], (
                    f"{panel['title']}: {name} has no labels {sorted(labels - exported[name])}"
                )
    assert queried >= 5
