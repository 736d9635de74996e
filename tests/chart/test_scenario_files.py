"""ci/scenario_files.py: the scenario list every tool derives from the `helm install` lines of values/."""

from __future__ import annotations

import pytest
from chartlib import VALUES, scenario_files

INSTALL = "# helm install miles ./charts/miles"


def write(folder, name, text):
    (folder / name).write_text(text)


def test_every_values_file_is_installed_by_some_scenario():
    installed = {f for files in scenario_files.scenarios().values() for f in files}
    assert installed == {p.name for p in VALUES.glob("values-*.yaml")}


def test_overlays_are_layered_on_the_base_their_install_line_names():
    found = scenario_files.scenarios()
    assert found["colocated + reward"] == ["values-colocated.yaml", "values-reward.yaml"]
    assert found["moe + hyperpod"] == ["values-moe.yaml", "values-hyperpod.yaml"]
    assert found["moe"] == ["values-moe.yaml"]
    # scenarios of one file come first
    sizes = [len(files) for files in found.values()]
    assert sizes == sorted(sizes, key=lambda n: n > 1)


def test_continued_and_repeated_install_lines(tmp_path):
    write(tmp_path, "values-base.yaml", f"{INSTALL} -f values/values-base.yaml --timeout 4h\n")
    write(tmp_path, "values-other.yaml", f"{INSTALL} -f values/values-other.yaml\n")
    write(
        tmp_path,
        "values-extra.yaml",
        "# Overlay.\n"
        "#   KUBECONFIG=x helm install miles ./charts/miles \\\n"
        "#     -f values/values-extra.yaml -f values/values-base.yaml\n"
        "# helm install miles ./charts/miles -f values/values-other.yaml -f values/values-extra.yaml\n"
        "key: 1\n"
        "# helm install miles ./charts/miles -f values/values-ignored.yaml (not in the leading comment)\n",
    )
    assert scenario_files.scenarios(tmp_path) == {
        "base": ["values-base.yaml"],
        "other": ["values-other.yaml"],
        "extra + base": ["values-extra.yaml", "values-base.yaml"],
        "other + extra": ["values-other.yaml", "values-extra.yaml"],
    }


def test_a_file_without_an_install_line_is_refused_by_name(tmp_path):
    write(tmp_path, "values-quiet.yaml", "# a scenario nobody can install\nkey: 1\n")
    refused = r"values/values-quiet.yaml: expected a leading comment line .*helm install.*found none"
    with pytest.raises(scenario_files.ScenarioError, match=refused):
        scenario_files.scenarios(tmp_path)


def test_an_install_line_naming_a_missing_file_is_refused(tmp_path):
    write(tmp_path, "values-a.yaml", f"{INSTALL} -f values/values-a.yaml -f values/values-b.yaml\n")
    refused = r"values/values-a.yaml: the install line names \['values-b.yaml'\], not found in values/"
    with pytest.raises(scenario_files.ScenarioError, match=refused):
        scenario_files.scenarios(tmp_path)
