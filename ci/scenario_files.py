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
    logical: list[str] = []  # comment lines, a line ending in a backslash joined to the next, as in a shell
    continued = False
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if continued:
            logical[-1] += " " + text
        else:
            logical.append(text)
        continued = logical[-1].endswith("\\")
        logical[-1] = logical[-1].removesuffix("\\")
    found: list[list[str]] = []
    for match in filter(None, map(_INSTALL.search, logical)):
        words = shlex.split(match["rest"])
        files = [Path(words[i + 1]).name for i, w in enumerate(words[:-1]) if w == "-f"]
        if not files:
            raise ScenarioError(f"values/{path.name}: the `helm install` line names no -f values file")
        found.append(files)
    return found


def scenarios(values_dir: Path = VALUES) -> dict[str, list[str]]:
    """Scenario name -> values files (names inside values/, in install order), for every install line."""
    found: dict[str, list[str]] = {}
    for path in sorted(values_dir.glob("values-*.yaml")):
        lines = install_lines(path)
        if not lines:
            raise ScenarioError(
                f"values/{path.name}: expected a leading comment line "
                "`# helm install miles ./charts/miles -f values/<file> ...`, found none"
            )
        for files in lines:
            missing = [f for f in files if not (values_dir / f).is_file()]
            if missing:
                raise ScenarioError(
                    f"values/{path.name}: the install line names {missing}, not found in values/"
                )
            found[scenario_name(files)] = files
    # scenarios of one file first, then the layered ones
    return dict(sorted(found.items(), key=lambda item: (len(item[1]) > 1, item[0])))


def files_alone(values_dir: Path = VALUES) -> dict[str, list[str]]:
    """Every values file on its own (an overlay must render even without the base it is written for)."""
    return {scenario_name([p.name]): [p.name] for p in sorted(values_dir.glob("values-*.yaml"))}


if __name__ == "__main__":
    for name, files in scenarios().items():
        print(f"{name}: {' '.join(files)}")
