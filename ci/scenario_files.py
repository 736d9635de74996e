"""The scenarios of values/, read from the files themselves.

Each values/values-<name>.yaml opens with the `helm install` line a user types to install it, for
example `# helm install miles ./charts/miles -f values/values-colocated.yaml -f values/values-reward.yaml`.
That line is the one place that says which files a scenario layers; every list of scenarios (make
scenarios, the chart tests, the contract tests, the helm-unittest scenario suite, ct lint) is derived
from it, so a new scenario is a new file and nothing else.

A scenario's name is its files' names without `values-` and `.yaml`, joined by " + "
("colocated + reward"); a file installed alone is named after itself ("moe").
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VALUES = ROOT / "values"
_INSTALL = re.compile(r"\bhelm install \S+ \./charts/miles\b(?P<rest>.*)")


class ScenarioError(ValueError):
    """A values/ file whose install line is missing or names a file that does not exist."""


def scenario_name(files: list[str]) -> str:
    return " + ".join(f.removeprefix("values-").removesuffix(".yaml") for f in files)


def install_lines(path: Path) -> list[list[str]]:
    """The values files of each `helm install` line in the file's leading comment block."""
    comment: list[str] = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("#").strip())
    # a line ending in a backslash continues on the next comment line, as in a shell
    joined = " ".join(comment).replace("\\ ", "")
    found: list[list[str]] = []
    for match in _INSTALL.finditer(joined):
        words = shlex.split(match["rest"].split("(")[0])
        files = [Path(words[i + 1]).name for i, w in enumerate(words[:-1]) if w == "-f"]
        if not files:
            raise ScenarioError(f"{path.relative_to(ROOT)}: the `helm install` line names no -f values file")
        found.append(files)
    return found


def scenarios(values_dir: Path = VALUES) -> dict[str, list[str]]:
    """Scenario name -> values files (names inside values/, in install order), for every install line."""
    found: dict[str, list[str]] = {}
    for path in sorted(values_dir.glob("values-*.yaml")):
        lines = install_lines(path)
        if not lines:
            raise ScenarioError(
                f"{path.relative_to(ROOT)}: expected a leading comment line "
                "`# helm install miles ./charts/miles -f values/<file> ...`, found none"
            )
        for files in lines:
            missing = [f for f in files if not (values_dir / f).is_file()]
            if missing:
                raise ScenarioError(f"{path.relative_to(ROOT)}: the install line names {missing}, not in values/")
            found[scenario_name(files)] = files
    return found


def files_alone(values_dir: Path = VALUES) -> dict[str, list[str]]:
    """Every values file on its own (an overlay must render even without the base it is written for)."""
    return {scenario_name([p.name]): [p.name] for p in sorted(values_dir.glob("values-*.yaml"))}


if __name__ == "__main__":
    for name, files in scenarios().items():
        print(f"{name}: {' '.join(files)}")
