"""The real miles-hooks library reads every rendered run spec: `miles-hooks plan` validates the spec
with the schema and checks it ships (including its own rules, e.g. no credential-like plain env) and
prints the plan from the chart's topology."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from chartlib import REPO, SCENARIOS, docs, render, run_spec


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_miles_hooks_plan_accepts_the_rendered_spec(scenario, tmp_path):
    spec = run_spec(docs(render("helm4", scenario)))
    path = tmp_path / "run.json"
    path.write_text(json.dumps(spec))
    env = dict(os.environ, PYTHONPATH=str(REPO / "hooks" / "src"))
    res = subprocess.run(
        [sys.executable, "-m", "miles_hooks", "plan", "--spec", str(path), "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    plan = json.loads(res.stdout)
    assert plan["topology"] == spec["topology"], "the hooks must take the chart's topology as is"
    assert len(plan["placement"]) == spec["topology"]["workerReplicas"] or spec["mode"] == "singleNode"
    assert "TOKENIZERS_PARALLELISM" not in plan["runtimeEnvVars"]


def test_the_chart_and_the_hooks_refuse_the_same_credential_names():
    """The chart refuses credential-like env names with a literal value in its values, the hooks in a
    run spec from anywhere: one pattern, written twice (a template cannot import Python)."""
    from miles_hooks.core import runspec

    template = (REPO / "charts" / "miles" / "templates" / "_validate.tpl").read_text()
    (chart_pattern,) = re.findall(r'\{\{- \$credentialName := "\(\?i\)(.*?)" -\}\}', template)
    assert chart_pattern == runspec._SECRET_NAME.pattern
    assert runspec._SECRET_NAME.flags & re.IGNORECASE
