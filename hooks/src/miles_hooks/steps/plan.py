"""plan: the resolved run for humans (a table) and machines (``--json``). Reads the spec only."""

from __future__ import annotations

from typing import Any

from miles_hooks.core.entrypoint import build_entrypoint, entrypoint_resources
from miles_hooks.core.runspec import RunSpec
from miles_hooks.core.runspec_types import RawSpec


def plan_json(spec: RunSpec) -> dict[str, Any]:
    raw = spec.raw
    return {
        "release": raw["release"],
        "mode": raw["mode"],
        "topology": raw["topology"],
        "placement": placement(raw),
        "model": raw["model"],
        "data": raw["data"],
        "output": raw["output"],
        "submissionId": spec.submission_id(),
        "runId": spec.run_id(),
        "entrypoint": build_entrypoint(raw),
        "entrypointResources": entrypoint_resources(raw),
        "runtimeEnvVars": sorted(raw["runtimeEnv"]["envVars"]),
        "secrets": [{"name": s["name"], "key": s["key"], "env": s["env"]} for s in raw["secrets"]],
    }


def placement(raw: RawSpec) -> list[dict[str, Any]]:
    """One row per worker pod: its role and what runs on its GPUs (from the chart's numbers)."""
    t = raw["topology"]
    rows = []
    for i in range(t["actorNodes"]):
        role = "actor + rollout" if t["colocate"] else "actor"
        engines = t["enginesPerWorker"] if t["colocate"] else 0
        rows.append({"worker": i, "role": role, "gpus": t["gpusPerWorker"], "rolloutEngines": engines})
    if not t["colocate"]:
        left = t["rolloutEngines"]
        for j in range(t["rolloutWorkers"]):
            n = min(t["enginesPerWorker"], left)
            left -= n
            rows.append(
                {
                    "worker": t["actorNodes"] + j,
                    "role": "rollout",
                    "gpus": t["gpusPerWorker"],
                    "rolloutEngines": n,
                }
            )
    return rows


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]


def render(spec: RunSpec) -> str:
    raw = spec.raw
    t = raw["topology"]
    rel = raw["release"]
    lines = [
        f"miles run plan — release {rel['name']} (namespace {rel['namespace']}, revision {rel['revision']}, "
        f"chart {rel['chartVersion']})",
        "",
    ]
    lines.append(
        f"mode        {raw['mode']}"
        + (
            f", RayCluster {raw['rayCluster']['name']} (Ray {raw['rayCluster']['rayVersion']})"
            if raw["rayCluster"]["enabled"]
            else ""
        )
    )
    head_gpus = int(raw["rayCluster"]["headGpus"])
    lines.append(
        f"topology    {'colocated' if t['colocate'] else 'disaggregated'}: {t['workerReplicas']} worker "
        f"pod(s) x {t['gpusPerWorker']} GPUs{f' + {head_gpus} on the head' if head_gpus else ''} "
        f"= {t['clusterGpus']} GPUs"
    )
    lines.append(
        f"actor       {t['actorNodes']} node(s) x {t['actorGpusPerNode']} GPUs = {t['actorGpus']} GPUs; "
        f"TP{t['tensorParallel']} PP{t['pipelineParallel']} CP{t['contextParallel']} EP{t['expertParallel']}"
    )
    lines.append(
        f"rollout     {t['rolloutGpus']} GPUs, {t['rolloutEngines']} engine(s) x "
        f"{t['rolloutGpusPerEngine']} GPU(s), {t['enginesPerWorker']} engine(s) per worker"
    )
    lines.append("")
    rows = [["worker", "role", "GPUs", "rollout engines"]]
    rows += [[str(r["worker"]), r["role"], str(r["gpus"]), str(r["rolloutEngines"])] for r in placement(raw)]
    lines += _table(rows)
    lines.append("")
    m = raw["model"]
    lines.append(
        f"model       {m['repoId']}@{m['revision']} (profile {m['profile']}, backend {m['trainBackend']})"
    )
    lines.append(f"  hf        {m['hfPath']}")
    lines.append(f"  torch_dist {m['torchDistPath']}")
    lines.append(f"data        {raw['data']['promptData']}")
    for ev in raw["data"]["evalData"]:
        lines.append(f"  eval      {ev['name']}: {ev['path']}")
    lines.append(f"output      {raw['output']['dir']} (checkpoints {raw['output']['checkpointDir']})")
    lines.append(
        f"reward      {raw['reward']['type']}"
        + (f" -> {raw['reward']['url']}" if raw["reward"]["url"] else "")
    )
    lines.append(
        f"image       {raw['images']['miles']}"
        + ("  (rolling tag: pin a digest)" if raw["images"]["milesRollingTag"] else "")
    )
    where = (
        "each attempt's own RayCluster (RayJob, KubeRay retries)"
        if raw["mode"] == "rayJob"
        else raw["rayCluster"]["dashboardUrl"]
    )
    lines.append(
        f"job         {spec.submission_id()} on {where}, resources "
        f"{raw['submit']['entrypointResources']}, on change: {raw['submit']['onChange']}"
    )
    lines.append(
        f"entrypoint  python3 {raw['train']['workdir']}/{raw['train']['entrypoint']} "
        f"$({raw['train']['modelArgsCommand']}) {' '.join(raw['train']['args'])}"
    )
    if raw["secrets"]:
        lines.append(
            "secrets     " + ", ".join(f"{s['env']} <- {s['name']}/{s['key']}" for s in raw["secrets"])
        )
    return "\n".join(lines)
