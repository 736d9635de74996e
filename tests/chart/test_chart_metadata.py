"""Chart.yaml carries what Artifact Hub and `helm search` users read; its images match values.yaml."""

from __future__ import annotations

import pathlib
import re

import yaml
from chartlib import KUBERAY_VERSIONS, REPO

CHART = pathlib.Path(__file__).resolve().parents[2] / "charts" / "miles"


def test_chart_metadata_is_complete() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    for key in ("kubeVersion", "appVersion", "maintainers", "sources", "keywords", "home", "description"):
        assert chart.get(key), f"Chart.yaml: {key} is missing or empty"
    notes = chart["annotations"]
    for key in ("artifacthub.io/license", "artifacthub.io/prerelease", "artifacthub.io/changes"):
        assert notes.get(key), f"Chart.yaml annotations: {key} is missing"
    for change in yaml.safe_load(notes["artifacthub.io/changes"]):
        assert change["kind"] in {"added", "changed", "deprecated", "removed", "fixed", "security"}, change


def test_artifacthub_images_match_the_default_values() -> None:
    """Each listed image is exactly what the chart runs by default: repository and tag (an empty tag is
    the chart's appVersion, as the image helpers render it)."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    listed = {i["image"] for i in yaml.safe_load(chart["annotations"]["artifacthub.io/images"])}
    images = [values["image"], values["hooks"]["image"], values["reward"]["image"]]
    defaults = {f"{i['repository']}:{i['tag'] or chart['appVersion']}" for i in images}
    assert listed == defaults


def test_kuberay_versions_agree_across_chart_schemas_and_testbed() -> None:
    """The KubeRay versions Chart.yaml names are the ones kubeconform validates against (oldest supported
    first), and the last is the operator the testbed builds and runs."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["annotations"]["miles.dev/kuberay-versions"] == " ".join(KUBERAY_VERSIONS)
    go_mod = (REPO / "ci" / "tools" / "kuberay" / "go.mod").read_text()
    (pinned,) = re.findall(r"github\.com/ray-project/kuberay/ray-operator v(\S+)", go_mod)
    assert pinned == KUBERAY_VERSIONS[-1]
