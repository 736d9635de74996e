"""Loading and validating the run spec (ConfigMap ``<fullname>-run``, key ``run.json``).

The chart resolves everything; hooks only read. ``load`` validates against the JSON Schema shipped in
``schemas/run-spec.schema.json`` and raises :class:`SpecError` naming the field, the expected value and
the value found. ``jsonschema`` is imported lazily so that ``import miles_hooks`` stays light.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, cast

from miles_hooks import SCHEMA_VERSION
from miles_hooks.core import log
from miles_hooks.core.errors import BadInput, SpecError
from miles_hooks.core.runspec_types import RawSpec

DEFAULT_SPEC_PATH = "/etc/miles/run.json"

# Env var names that look like credentials must come from Secrets (spec.secrets), never from the
# plain runtime env that ends up in the Ray job's metadata. The chart refuses the same names in its
# values with the same pattern (templates/_validate.tpl; tests/chart keeps the two equal).
_SECRET_NAME = re.compile(
    r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?|PAT)(_|$)"
    r"|_(KEY|AUTH)$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class RunSpec:
    """The validated spec plus where it came from. ``raw`` is the parsed JSON object."""

    raw: RawSpec
    path: str

    def __getitem__(self, key: str) -> Any:
        section: Mapping[str, Any] = self.raw
        return section[key]

    @property
    def release(self) -> str:
        return str(self.raw["release"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.raw["release"]["namespace"])

    @property
    def dashboard_url(self) -> str:
        return str(self.raw["rayCluster"]["dashboardUrl"]).rstrip("/")

    def run_id(self) -> str:
        return run_id(self.raw)

    def reached_at(self, dashboard: str) -> RunSpec:
        """This spec with the Ray dashboard at ``dashboard`` (a port-forward from a laptop) instead of the
        in-cluster Service address it names."""
        if not re.fullmatch(r"https?://[^\s/]+(:[0-9]+)?/?", dashboard):
            raise BadInput(
                f"--address: expected the Ray dashboard's http(s)://host:port (e.g. http://127.0.0.1:8265 "
                f"through `kubectl port-forward`), found {dashboard!r}"
            )
        raw = cast(RawSpec, json.loads(json.dumps(self.raw)))
        raw["rayCluster"]["dashboardUrl"] = dashboard.rstrip("/")
        return RunSpec(raw, self.path)

    def read_from(self, local_output_dir: str) -> RunSpec:
        """This spec with its output paths (``output.dir`` and what lies under it) read from
        ``local_output_dir``: a copy of the run directory, or the volume mounted elsewhere."""
        local = Path(local_output_dir)
        if not local.is_dir():
            raise BadInput(
                f"--output-dir: expected a directory (a copy of output.dir), found {local_output_dir!r}"
            )
        raw = cast(RawSpec, json.loads(json.dumps(self.raw)))
        out = raw["output"]
        base = Path(out["dir"])
        for key in ("checkpointDir", "tensorboardDir", "provenanceFile"):
            path = Path(str(out[key]))
            if path.is_relative_to(base):
                out[key] = str(local / path.relative_to(base))
        out["dir"] = str(local)
        return RunSpec(raw, self.path)

    def submission_id(self) -> str:
        return submission_id(self.raw)


def schema() -> dict[str, Any]:
    text = resources.files("miles_hooks").joinpath("schemas/run-spec.schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _path_of(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _describe(error: Any) -> str:
    """One line per schema violation: field, what the schema expects, what was found."""
    where = _path_of(error.absolute_path)
    found = json.dumps(error.instance, default=str)
    if len(found) > 120:
        found = found[:117] + "..."
    validator = error.validator
    expected: str
    if validator == "required":
        missing = [k for k in error.validator_value if k not in (error.instance or {})]
        return f"{where}: required field(s) {', '.join(missing)} missing"
    if validator == "additionalProperties":
        allowed = sorted((error.schema.get("properties") or {}).keys())
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        return (
            f"{where}: unknown field(s) {', '.join(extra)} (this hooks version knows: "
            f"{', '.join(allowed)}); chart and hooks image versions probably differ"
        )
    if validator == "enum":
        expected = "one of " + ", ".join(json.dumps(v) for v in error.validator_value)
    elif validator == "const":
        expected = json.dumps(error.validator_value)
    elif validator == "type":
        expected = f"type {error.validator_value}"
    elif validator == "pattern":
        expected = f"a string matching {error.validator_value}"
    elif validator in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "minLength", "minItems"):
        expected = f"{validator} {error.validator_value}"
    else:
        expected = f"{validator} {json.dumps(error.validator_value, default=str)}"
    return f"{where}: expected {expected}, found {found}"


def validate(raw: Any, source: str = "run spec") -> list[str]:
    """Return every problem in ``raw`` (schema violations, then semantic rules); empty when valid."""
    if not isinstance(raw, dict):
        return [f"(top level): expected a JSON object, found {type(raw).__name__}"]
    version = raw.get("schemaVersion")
    if version != SCHEMA_VERSION:
        return [
            f"schemaVersion: expected {SCHEMA_VERSION} (this hooks image), found {json.dumps(version)}; "
            "use a hooks image that matches the chart version"
        ]
    problems: list[str] = []
    try:
        import jsonschema  # noqa: PLC0415 - absent from the miles image, where convert loads the spec
    except ImportError:  # pragma: no cover - only inside an image without jsonschema
        log.get("spec").warning("jsonschema is not installed here: checking only the top-level fields")
        missing = [k for k in schema()["required"] if k not in raw]
        problems.extend(f"{k}: required field missing" for k in missing)
    else:
        validator = jsonschema.Draft7Validator(schema())
        errors = sorted(validator.iter_errors(raw), key=lambda e: [str(p) for p in e.absolute_path])
        problems.extend(_describe(e) for e in errors)
    if problems:
        return problems
    return semantic_problems(cast(RawSpec, raw))


def semantic_problems(raw: RawSpec) -> list[str]:
    """Rules JSON Schema cannot express: secrets only by reference."""
    problems: list[str] = []
    env_vars: dict[str, str] = raw["runtimeEnv"]["envVars"]
    secret_envs = {s["env"] for s in raw["secrets"]}
    for name in sorted(env_vars):
        if name in secret_envs:
            problems.append(
                f"the run spec's runtimeEnv.envVars {name}: expected no value for an env var that comes "
                "from a Secret (it is listed in secrets[]), found one; remove it from the runtime env"
            )
        elif _SECRET_NAME.search(name):
            problems.append(
                f"the run spec's runtimeEnv.envVars {name}: expected credentials only by Secret reference, "
                "found a plain value for a credential-like name; move it to a Secret (existingSecret + key)"
            )
    return problems


def parse(text: str, source: str) -> RunSpec:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"run spec {source} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    problems = validate(raw, source)
    if problems:
        raise SpecError(
            f"run spec {source} does not match the schema of miles-hooks (schemaVersion {SCHEMA_VERSION}):",
            problems,
        )
    return RunSpec(raw=raw, path=source)


def load(path: str | Path) -> RunSpec:
    p = Path(path)
    try:
        text = p.read_text("utf-8")
    except FileNotFoundError as exc:
        raise SpecError(
            f"run spec not found at {p}: expected the ConfigMap <fullname>-run mounted at "
            "/etc/miles (or pass --spec PATH)"
        ) from exc
    except OSError as exc:
        raise SpecError(f"run spec {p} cannot be read: {exc.strerror}") from exc
    return parse(text, str(p))


def load_raw(path: str | Path) -> dict[str, Any]:
    """The spec file's JSON object, not validated: for ``gpu-check``, which reads only ``checks.gpu``
    and the GPUs per worker and also runs on a node with a hand-written file."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise SpecError(f"cannot read run spec {path}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise SpecError(f"run spec {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SpecError(f"run spec {path}: top level must be an object")
    return data


def run_id(raw: Mapping[str, Any]) -> str:
    """The run's identity as the chart computed it (``run.id``: the SHA-256 of the job-defining sections)."""
    return str(raw["run"]["id"])


def submission_id(raw: Mapping[str, Any]) -> str:
    """The Ray job's id in every mode (``submit.submissionId``, the chart's ``miles.submissionId``): the same
    run always maps to the same id, so an unchanged `helm upgrade` submits nothing."""
    return str(raw["submit"]["submissionId"])
