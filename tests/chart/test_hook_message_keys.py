"""Every key a hook's message names is a real one: a values key (`storage.type`) exists in the chart's
values.yaml; a run-spec field, which messages name as "the run spec's <field>" (or "run spec field
<field>"), exists in the run-spec schema. A message that sends the user to a key that does not exist
(`storage.kind`) is a dead end."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
HOOKS = REPO / "hooks" / "src" / "miles_hooks"
VALUES = yaml.safe_load((REPO / "charts" / "miles" / "values.yaml").read_text())
SPEC_SCHEMA = json.loads((HOOKS / "schemas" / "run-spec.schema.json").read_text())
# how a message names a run-spec field (the second where a quote would need escaping in a shell command)
SPEC_PREFIXES = ("the run spec's ", "run spec field ")


def key_pattern(tops: set[str]) -> re.Pattern[str]:
    """A dotted path whose first part is one of ``tops``, not inside a longer word, path or URL."""
    alternatives = "|".join(sorted(tops, key=len, reverse=True))
    prefixes = "|".join(map(re.escape, SPEC_PREFIXES))
    # a file name (train.py, model.safetensors.index.json) is not a key
    files = r"(?<!\.py)(?<!\.json)(?<!\.safetensors)"
    key = rf"((?:{prefixes})?)((?:{alternatives})(?:\.[A-Za-z]\w*)+)"
    return re.compile(rf"(?<![\w./-]){key}(?!\w|\.\w){files}")


def in_values(path: str) -> bool:
    node: Any = VALUES
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def in_spec(path: str) -> bool:
    node: Any = SPEC_SCHEMA
    for part in path.split("."):
        while isinstance(node, dict) and "$ref" in node:
            node = SPEC_SCHEMA["definitions"][node["$ref"].rsplit("/", 1)[1]]
        props = node.get("properties") if isinstance(node, dict) else None
        if not isinstance(props, dict) or part not in props:
            return False
        node = props[part]
    return True


def docstring_ids(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def named_keys() -> list[tuple[str, str, bool]]:
    """(where, key, named as a run-spec field) for every key a string of the hooks' code names, docstrings
    left out (they describe the spec for developers)."""
    pattern = key_pattern(set(VALUES) | set(SPEC_SCHEMA["properties"]))
    out = []
    for source in sorted(HOOKS.rglob("*.py")):
        tree = ast.parse(source.read_text())
        skip = docstring_ids(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                for match in pattern.finditer(node.value):
                    where = f"{source.relative_to(REPO)}:{node.lineno}"
                    out.append((where, match.group(2), bool(match.group(1))))
    return out


def test_every_key_a_hook_message_names_exists() -> None:
    keys = named_keys()
    assert len(keys) > 40, f"the scan found only {len(keys)} keys: the pattern no longer matches the messages"
    wrong = [
        f"{where}: {'run-spec field' if spec else 'values key'} {key} does not exist"
        for where, key, spec in keys
        if not (in_spec(key) if spec else in_values(key))
    ]
    assert not wrong, "\n".join(wrong)


def test_the_scan_catches_a_key_that_does_not_exist() -> None:
    pattern = key_pattern(set(VALUES) | set(SPEC_SCHEMA["properties"]))
    text = "set storage.kind, or the run spec's output.nowhere; see storage.type, the run spec's output.dir"
    found = [(m.group(2), bool(m.group(1))) for m in pattern.finditer(text + ", train.py")]
    assert found == [
        ("storage.kind", False),
        ("output.nowhere", True),
        ("storage.type", False),
        ("output.dir", True),
    ]
    assert [in_spec(k) if spec else in_values(k) for k, spec in found] == [False, False, True, True]
