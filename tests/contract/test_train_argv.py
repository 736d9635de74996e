"""The train argv the chart renders, through the real upstream parser (miles-rl 0.0.2: miles, Megatron
and SGLang argument parsing and validation, the job-start layout checks and the tracking init).

Our stand-ins are not evidence: every scenario of the README is rendered by the real Helm and fed,
with the profile's real model args and the model's real config.json, to ``parse_args`` in the contract
venv. Each chart rule that mirrors an upstream check is paired with that check refusing the same
layout, so the rule is shown to guard a real failure; where upstream only fails later (when Megatron
builds or trains the model), the pair shows the parser letting it through.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from contractlib import (
    DRIVER,
    SCENARIOS,
    contract_python,
    document,
    launcher_args,
    model_args,
    parse,
    render,
    run_spec,
)


def spec_of(scenario: str, *sets: str) -> dict[str, Any]:
    return run_spec(render(SCENARIOS[scenario], *sets))


def argv_of(spec: dict[str, Any]) -> list[str]:
    return model_args(spec["model"]["profile"]) + list(spec["train"]["args"])


def with_value(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag``'s value replaced (the flag must be there)."""
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


def assert_ok(result: dict[str, Any], what: str) -> dict[str, Any]:
    assert result["ok"], (
        f"{what}: the real parser refused it at {result['stage']} ({result.get('where')}): "
        f"{result.get('error')}\n" + "\n".join(result.get("log") or [])
    )
    args: dict[str, Any] = result["args"]
    return args


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_scenario_starts_on_the_real_parser(scenario: str) -> None:
    spec = spec_of(scenario)
    args = assert_ok(parse(document(spec)), scenario)
    topo, arch = spec["topology"], spec["model"]["architecture"]
    # what upstream resolved is what the chart says the run is
    assert args["world_size"] == topo["actorGpus"]
    assert args["num_gpus_per_node"] == topo["gpusPerWorker"]
    assert args["tensor_model_parallel_size"] == topo["tensorParallel"]
    assert args["pipeline_model_parallel_size"] == topo["pipelineParallel"]
    assert args["context_parallel_size"] == topo["contextParallel"]
    assert args["expert_model_parallel_size"] == topo["expertParallel"]
    assert args["expert_tensor_parallel_size"] == topo["expertTensorParallel"]
    assert args["data_parallel_size"] == topo["dataParallel"]
    assert args["sequence_parallel"] is topo["sequenceParallel"]
    assert args["colocate"] is topo["colocate"]
    assert args["rollout_num_gpus"] == topo["rolloutGpus"]
    assert args["sglang_tp_size"] == topo["rolloutGpusPerEngine"]
    # the chart's table of known profiles agrees with the profile's real model args
    assert args["num_layers"] == arch["numLayers"]
    assert args["num_attention_heads"] == arch["numAttentionHeads"]
    assert args["num_query_groups"] == arch["numQueryGroups"]
    assert (args["num_experts"] or 0) == arch["numExperts"]
    # every scenario tracks with TensorBoard (the chart default), the testbed's too: its stand-in writes the
    # events the report judges
    assert args["use_tensorboard"] is True
    assert args["train_backend"] == "megatron"


def test_single_node_launcher_with_the_chart_args_starts_on_the_real_parser() -> None:
    """The single-node Job runs upstream's launcher, which puts its own recipe first and the chart's
    args (MILES_SCRIPT_EXTRA_ARGS) last: the whole argv must parse, the chart's values must win, and
    what the launcher adds that the chart cannot take back shows (docs/recipes.md)."""
    manifest = render(SCENARIOS["single-node"])
    spec = run_spec(manifest)
    [job] = [
        d
        for d in yaml.safe_load_all(manifest)
        if d and d["kind"] == "Job" and "-train-" in d["metadata"]["name"]
    ]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    extra = shlex.split(env["MILES_SCRIPT_EXTRA_ARGS"])
    assert extra == spec["train"]["args"]
    dirs = {
        "model_dir": env["MILES_SCRIPT_MODEL_DIR"],
        "data_dir": env["MILES_SCRIPT_DATA_DIR"],
        "output_dir": env["MILES_SCRIPT_OUTPUT_DIR"],
    }
    launcher = launcher_args(
        job["spec"]["template"]["spec"]["containers"][0]["args"][-1].split()[-1],
        env["MILES_SCRIPT_MODEL_NAME"],
        dirs,
    )
    args = assert_ok(
        parse(document(spec, model_args(spec["model"]["profile"]) + launcher + extra)), "single-node"
    )
    topo = spec["topology"]
    assert args["tensor_model_parallel_size"] == topo["tensorParallel"]  # the launcher's TP 2 overridden
    assert args["rollout_num_gpus_per_engine"] == topo["rolloutGpusPerEngine"]
    assert args["world_size"] == topo["actorGpus"] and args["colocate"] is True
    assert args["num_rollout"] == int(extra[extra.index("--num-rollout") + 1])
    assert args["save"] == spec["output"]["checkpointDir"]
    assert args["ref_load"] == spec["model"]["torchDistPath"]
    assert args["use_kl_loss"] is True  # from the launcher's recipe: no flag of the chart turns it off


def test_tensorboard_tracking_needs_the_runtime_env_the_chart_sets() -> None:
    """Regression: miles' tracking init raises unless TENSORBOARD_DIR (or --tb-project-name) is set;
    the chart's --tensorboard-dir (a Megatron flag) never satisfied it."""
    spec = spec_of("colocated")
    assert spec["runtimeEnv"]["envVars"]["TENSORBOARD_DIR"] == spec["output"]["tensorboardDir"]
    assert "--tensorboard-dir" not in spec["train"]["args"]
    doc = document(spec)
    del doc["env"]["TENSORBOARD_DIR"]
    result = parse(doc)
    assert not result["ok"] and result["stage"] == "tracking", result
    assert "TENSORBOARD_DIR are required" in result["error"]
    assert "tensorboard_utils.py" in result["where"]


def test_an_unknown_flag_or_a_bad_value_is_refused() -> None:
    """The harness is the real parser, not parse_known_args: what upstream refuses fails here."""
    spec = spec_of("colocated")
    unknown = parse(document(spec, [*argv_of(spec), "--no-such-flag", "1"]))
    assert not unknown["ok"] and "unrecognized arguments: --no-such-flag 1" in unknown["error"]
    bad = parse(document(spec, with_value(argv_of(spec), "--rollout-batch-size", "many")))
    assert not bad["ok"] and "--rollout-batch-size" in bad["error"] and "'many'" in bad["error"]


def test_moe_trains_with_sequence_parallelism_and_the_chart_refuses_it_off() -> None:
    """Regression: Megatron's MoE layer raises at the first training step when TP > 1 without
    sequence parallelism; the parser lets that through, so the chart is the guard."""
    spec = spec_of("moe")
    assert "--sequence-parallel" in spec["train"]["args"]
    assert spec["topology"]["tensorParallel"] == 2 and spec["topology"]["sequenceParallel"] is True
    without = [a for a in argv_of(spec) if a != "--sequence-parallel"]
    passed = assert_ok(parse(document(spec, without)), "MoE TP2 without --sequence-parallel")
    assert passed["sequence_parallel"] is False  # only the training step would refuse it
    with pytest.raises(RuntimeError, match=r"topology\.sequenceParallel: expected true for the MoE model"):
        render(SCENARIOS["moe"], "topology.sequenceParallel=false")
    # the upstream check the rule mirrors is still there (megatron/core/transformer/moe/moe_layer.py)
    source = upstream_source("megatron.core.transformer.moe.moe_layer")
    assert "not self.config.sequence_parallel:" in source
    assert "enabled without also enabling sequence parallelism" in source


def test_the_fsdp_backend_is_refused_by_the_chart() -> None:
    """Regression: miles' FSDP backend parses a different argument set (none of the TP/PP/EP flags the
    chart passes) and refuses to start outside upstream's CI; the chart no longer offers it."""
    with pytest.raises(RuntimeError, match=r"trainBackend"):
        render(SCENARIOS["colocated"], "model.trainBackend=fsdp")
    source = upstream_source("miles.utils.arguments")
    assert "The FSDP backend has known issues" in source


def test_distributed_post_is_refused_with_a_cpu_head_as_upstream_pins_it_to_every_node() -> None:
    """miles' --use-distributed-post places an HTTP actor (0.001 CPU) with hard node affinity on every
    alive Ray node; the chart's CPU head has num-cpus 0, so the run would wait for it for ever."""
    with pytest.raises(RuntimeError, match=r"expected no --use-distributed-post with a CPU head"):
        render(SCENARIOS["colocated"], "recipe.extraArgs={--use-distributed-post}")
    source = upstream_source("miles.utils.http_utils")
    assert 'ray.nodes() if n.get("Alive")' in source
    assert "NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)" in source
    assert "num_cpus=0.001" in source


def upstream_source(module: str) -> str:
    """The source of an upstream module as installed in the contract venv (not imported here)."""
    done = subprocess.run(
        [
            contract_python(),
            "-c",
            f"import importlib.util, sys; print(importlib.util.find_spec({module!r}).origin)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip()).read_text()


# Chart rules paired with the upstream check each mirrors: (scenario, --set values the chart refuses,
# the chart's message, the same layout as an argv edit of the valid scenario, what upstream says; None
# when upstream lets it through and only fails once Megatron builds the model).
RULES: list[tuple[str, list[str], str, dict[str, str], str | None]] = [
    (
        "colocated",
        ["topology.pipelineParallel=8"],
        "topology.pipelineParallel: expected a divisor of the model's 36 layers",
        {"--pipeline-model-parallel-size": "8"},
        "Number of layers should be divisible by the pipeline-model-parallel size",
    ),
    (
        "colocated",
        ["topology.expertParallel=2"],
        "topology.expertParallel: expected 1 for the dense model",
        {"--expert-model-parallel-size": "2"},
        "num_experts must be non None",
    ),
    (
        "colocated",
        ["recipe.rolloutBatchSize=25", "recipe.nSamplesPerPrompt=4", "recipe.globalBatchSize=100"],
        "recipe.globalBatchSize: expected a multiple of the data-parallel size",
        {"--rollout-batch-size": "25", "--n-samples-per-prompt": "4", "--global-batch-size": "100"},
        "is not divisible by micro batch size (1) times data parallel size (8)",
    ),
    (
        "colocated",
        ["recipe.globalBatchSize=128"],
        "recipe.globalBatchSize: expected rolloutBatchSize×nSamplesPerPrompt",
        {"--global-batch-size": "128"},
        "global_batch_size 128 is not equal to rollout_batch_size 32 * n_samples_per_prompt 8",
    ),
    (
        "colocated",
        ["topology.tensorParallel=3"],
        "topology.tensorParallel×pipelineParallel×contextParallel: expected a divisor of the actor GPUs",
        {"--tensor-model-parallel-size": "3"},
        "is not divisible by total_model_size",
    ),
    (
        "moe",
        ["topology.expertParallel=32"],
        "topology.expertParallel: expected expertTensorParallel×expertParallel×pipelineParallel",
        {"--expert-model-parallel-size": "32"},
        "is not divisible by expert_tensor_model_pipeline_parallel size",
    ),
    (
        "moe",
        ["recipe.checkpoint.retainInterval=30"],
        "recipe.checkpoint.retainInterval: expected a multiple of recipe.saveInterval (20)",
        {"--save-retain-interval": "30"},
        "",  # a bare assert: no message, the raising line is megatron/training/arguments.py
    ),
    (
        "moe",
        ["topology.tensorParallel=8", "topology.rolloutGpusPerEngine=8", "recipe.sglangExpertParallel=8"],
        "topology.tensorParallel: expected a divisor of the model's 4 query groups",
        {
            "--tensor-model-parallel-size": "8",
            "--rollout-num-gpus-per-engine": "8",
            "--sglang-expert-parallel-size": "8",
        },
        None,  # megatron/core/transformer/attention.py divides the query groups at model build
    ),
]


@pytest.mark.parametrize(
    ("scenario", "sets", "chart_says", "edit", "upstream_says"),
    RULES,
    ids=[r[2].split(":")[0] + "-" + "-".join(r[3]) for r in RULES],
)
def test_chart_rule_guards_a_real_upstream_failure(
    scenario: str, sets: list[str], chart_says: str, edit: dict[str, str], upstream_says: str | None
) -> None:
    with pytest.raises(RuntimeError, match=re.escape(chart_says)):
        render(SCENARIOS[scenario], *sets)
    spec = spec_of(scenario)
    argv = argv_of(spec)
    for flag, value in edit.items():
        argv = with_value(argv, flag, value)
    result = parse(document(spec, argv))
    if upstream_says is None:
        assert_ok(result, f"{edit} (only Megatron's model build refuses it)")
    else:
        assert not result["ok"], f"upstream accepted {edit}: the chart rule would guard nothing"
        assert upstream_says in (result["error"] or ""), result
        if not upstream_says:
            assert "megatron/training/arguments.py" in (result["where"] or ""), result


def test_contract_env_is_the_pinned_upstream_build() -> None:
    """The parser under test is PyPI miles-rl 0.0.2, vendoring miles, Megatron and SGLang."""
    done = subprocess.run(
        [
            contract_python(),
            "-c",
            "import importlib.metadata as m, importlib.util as u; "
            "found = all(u.find_spec(p) for p in ('miles', 'megatron.training.arguments', 'sglang')); "
            "print(m.version('miles-rl'), found)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.splitlines()[-1] == "0.0.2 True"  # importing megatron.training logs first
    assert importlib.util.find_spec("miles") is None  # and it is not importable from the project venv


def test_a_stopped_parse_leaves_no_scratch_directory(tmp_path: Path) -> None:
    """A Ray job stopped mid-parse (the testbed's train.py runs this driver) gets SIGTERM: the driver exits
    143 through its `with` blocks, and its scratch directory under TMPDIR goes with it."""
    doc = document(spec_of("colocated"))
    proc = subprocess.Popen(
        [contract_python(), str(DRIVER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(doc))
    proc.stdin.close()
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("miles-contract-*")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the driver made no scratch directory in 120 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 143
    assert list(tmp_path.glob("miles-contract-*")) == []
