#!/usr/bin/env python3
"""Feed a miles train argv through the real upstream parser on a CPU-only machine.

Runs ``miles.utils.arguments.parse_args`` (Megatron parse -> hf_validate_args ->
miles_validate_args -> Megatron validate_args -> SGLang validate) from the pinned
contract environment (ci/miles-contract/requirements.txt), then, when the argv enables
``--use-tensorboard``, the real tensorboard tracking init.

Input (JSON, from the file named by the first argument, or stdin when it is absent or "-"):
  {
    "argv": ["--train-backend", "megatron", ...],   # the train.py argv, without the program name
    "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},      # the runtime env the chart gives the driver
    "hfConfigDir": "ci/miles-contract/hf-configs/Qwen3-4B",  # replaces the value of --hf-checkpoint
    "sandbox": {                                      # keep filesystem checks hermetic
      "prefixes": ["/models", "/data", "/ckpt"],      # argv/env values under these move into a temp dir
      "dirs": ["/models/Qwen3-4B_torch_dist"],        # created (under the temp dir) before parsing
      "files": {"/models/x/latest_checkpointed_iteration.txt": "release"}
    },
    "device": {"major": 9, "minor": 0},               # CUDA arch reported to Megatron's probes; null: none
    "runtimeChecks": true,                            # upstream's job-start batch / engine-plan checks
    "tracking": true,                                 # run the real tensorboard init (default true)
    "fields": ["lr"]                                  # extra resolved fields to print
  }

Output (stdout, one JSON object): {"ok", "stage", "error", "errorType", "where", "log", "args"};
"where" is the upstream file:line that raised.
Exit status: 0 when ok, 1 on any parser/validator/tracking failure, 2 on a bad input document.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import traceback
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Environment variables the parse path (or the tracking init) reads; they are scrubbed unless the
# document sets them, so the result depends only on the document.
_UPSTREAM_ENV = (
    "TENSORBOARD_DIR",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "MILES_BACKEND",
    "RANK",
    "WORLD_SIZE",
    "DEPRECATED_MEGATRON_COMPATIBLE",
    "MILES_EXPERIMENTAL_ROLLOUT_REFACTOR",
    "MILES_SCRIPT_ENV_REPORT",
    "PROMETHEUS_PORT",
    "NCCL_ALGO",
    "NVTE_CPU_OFFLOAD_V1",
    "PYTORCH_CUDA_ALLOC_CONF",
    "NCCL_GRAPH_REGISTER",
)
_SCRUB_PREFIXES = ("SGLANG_", "MILES_", "NVTE_")

DEFAULT_FIELDS = (
    "train_backend",
    "hf_checkpoint",
    "load",
    "ref_load",
    "save",
    "start_rollout_id",
    "finetune",
    "actor_num_nodes",
    "actor_num_gpus_per_node",
    "num_gpus_per_node",
    "world_size",
    "colocate",
    "offload_train",
    "offload_rollout",
    "rollout_num_gpus",
    "rollout_num_gpus_per_engine",
    "sglang_tp_size",
    "sglang_dp_size",
    "sglang_ep_size",
    "sglang_pp_size",
    "sglang_mem_fraction_static",
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "data_parallel_size",
    "sequence_parallel",
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "num_experts",
    "moe_router_topk",
    "moe_token_dispatcher_type",
    "padded_vocab_size",
    "seq_length",
    "rollout_batch_size",
    "n_samples_per_prompt",
    "num_steps_per_rollout",
    "global_batch_size",
    "micro_batch_size",
    "num_rollout",
    "use_dynamic_batch_size",
    "max_tokens_per_gpu",
    "log_probs_max_tokens_per_gpu",
    "eval_interval",
    "save_interval",
    "use_kl_loss",
    "use_tensorboard",
    "tb_project_name",
    "use_wandb",
    "variable_seq_lengths",
)


class InputError(Exception):
    """The input document is malformed."""


def _load_document(argv: list[str]) -> dict[str, Any]:
    source = argv[1] if len(argv) > 1 and argv[1] != "-" else None
    text = Path(source).read_text(encoding="utf-8") if source else sys.stdin.read()
    doc = json.loads(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("argv"), list):
        raise InputError('the document must be an object with an "argv" list')
    if not all(isinstance(a, str) for a in doc["argv"]):
        raise InputError('"argv" must hold strings only')
    hf_dir = doc.get("hfConfigDir")
    if hf_dir is not None:
        if not isinstance(hf_dir, str) or not (Path(hf_dir) / "config.json").is_file():
            raise InputError(f'"hfConfigDir" must be a directory holding config.json: {hf_dir!r}')
        doc["hfConfigDir"] = str(Path(hf_dir).resolve())
    env = doc.get("env") or {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise InputError('"env" must map strings to strings')
    return doc


class Sandbox:
    """Moves path values under configured prefixes into a temp dir and maps them back for output."""

    def __init__(self, root: Path, spec: dict[str, Any]) -> None:
        self.root = root / "sandbox"
        self.prefixes: list[str] = [p.rstrip("/") for p in spec.get("prefixes", [])]

    def _match(self, value: str) -> str | None:
        for prefix in self.prefixes:
            if value == prefix or value.startswith(prefix + "/"):
                return prefix
        return None

    def inward(self, value: str) -> str:
        if "=" in value and value.startswith("--"):
            flag, _, rest = value.partition("=")
            return f"{flag}={self.inward(rest)}"
        return str(self.root) + value if self._match(value) else value

    def outward(self, value: Any) -> Any:
        if isinstance(value, str) and value.startswith(str(self.root) + "/"):
            return value[len(str(self.root)) :]
        if isinstance(value, list):
            return [self.outward(v) for v in value]
        return value

    def materialize(self, spec: dict[str, Any]) -> None:
        for d in spec.get("dirs", []):
            Path(self.inward(d)).mkdir(parents=True, exist_ok=True)
        for f, content in (spec.get("files") or {}).items():
            path = Path(self.inward(f))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(str(content), encoding="utf-8")


def _set_env(env: dict[str, str], sandbox: Sandbox, tmp: Path) -> dict[str, str]:
    for key in list(os.environ):
        if key in _UPSTREAM_ENV or key.startswith(_SCRUB_PREFIXES):
            del os.environ[key]
    applied = {k: sandbox.inward(v) for k, v in env.items()}
    # The tracking init only checks that TENSORBOARD_DIR is set, then creates it: point it into tmp.
    if "TENSORBOARD_DIR" in applied:
        applied["TENSORBOARD_DIR"] = str(tmp / "tensorboard" / env["TENSORBOARD_DIR"].lstrip("/"))
    os.environ.update(applied)
    # Never reach the Hugging Face Hub: hf_validate_args reads config.json from the given directory only.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return applied


def _fake_cuda_device(device: dict[str, Any] | None) -> None:
    """Answer Megatron validate_args' device probes (arch/capability) without a GPU.

    Only ``torch.cuda.get_device_properties`` / ``get_device_capability`` are replaced, and only when
    no CUDA device exists; every upstream check still runs on the reported arch.
    """
    import torch

    if device is None or torch.cuda.is_available():
        return
    major, minor = int(device.get("major", 9)), int(device.get("minor", 0))
    props = types.SimpleNamespace(
        major=major,
        minor=minor,
        name=str(device.get("name", f"contract-fake-sm{major}{minor}")),
        total_memory=int(device.get("totalMemory", 141 * 1024**3)),
        multi_processor_count=int(device.get("multiProcessorCount", 132)),
    )
    cuda: Any = torch.cuda
    cuda.get_device_properties = lambda device=None: props
    cuda.get_device_capability = lambda device=None: (major, minor)


def _rewrite_hf_checkpoint(argv: list[str], hf_dir: str | None) -> list[str]:
    if not hf_dir:
        return argv
    out = list(argv)
    for i, a in enumerate(out):
        if a == "--hf-checkpoint" and i + 1 < len(out):
            out[i + 1] = hf_dir
        elif a.startswith("--hf-checkpoint="):
            out[i] = f"--hf-checkpoint={hf_dir}"
    return out


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def _where(exc: BaseException) -> str | None:
    """The innermost upstream frame (package-relative file:line) that raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        for marker in ("site-packages/", "dist-packages/"):
            if marker in frame.filename:
                return f"{frame.filename.split(marker, 1)[1]}:{frame.lineno}"
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None


def _error_message(exc: BaseException, captured: str) -> str:
    if isinstance(exc, SystemExit):
        errors = [line for line in captured.splitlines() if ": error: " in line]
        return errors[-1] if errors else f"argparse exited with status {exc.code}"
    return f"{type(exc).__name__}: {exc}"


def _model_parallel_groups(args: Any) -> None:
    import argparse

    import torch.distributed as dist
    from megatron.core import mpu
    from miles.backends.megatron_utils.initialize import _initialize_distributed
    from torch.testing._internal.distributed.fake_pg import FakeStore

    # Gloo groups cannot be built over a fake store; everything else is upstream's call as is.
    fake_args = argparse.Namespace(**{**vars(args), "enable_gloo_process_groups": False})
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=args.world_size)
    try:
        _initialize_distributed(fake_args)
    finally:
        mpu.destroy_model_parallel()
        dist.destroy_process_group()


def _runtime_checks(args: Any) -> None:
    """Run the pure-Python checks upstream performs at job start, before any GPU work.

    - Megatron's process-group layout (``mpu.initialize_model_parallel`` through miles'
      ``_initialize_distributed``) on a fake process group of args.world_size ranks:
      world size vs TP*PP*CP and ETP*EP*PP.
    - Megatron's microbatch calculator, called with the arguments miles passes it
      (miles/backends/megatron_utils/initialize.py): global batch vs micro batch x data parallel.
    - The SGLang engine-group plan (miles/ray/rollout.py ``_resolve_sglang_config`` and
      ``ModelConfig.resolve``): rollout GPU counts, --sglang-config totals, prefill/decode split.
    """
    if args.train_backend == "megatron":
        _model_parallel_groups(args)
        from megatron.core import num_microbatches_calculator as nmc

        nmc.init_num_microbatches_calculator(
            args.rank,
            args.rampup_batch_size,
            args.global_batch_size,
            args.micro_batch_size,
            args.data_parallel_size,
            args.decrease_batch_size_if_needed,
        )
        nmc.destroy_num_microbatches_calculator()
    if not args.debug_train_only:
        from miles.ray.rollout import _resolve_sglang_config

        for model_cfg in _resolve_sglang_config(args).models:
            model_cfg.resolve(args)


@contextlib.contextmanager
def _captured_output(path: Path) -> Iterator[Path]:
    """Send fds 1 and 2 (Python and C level) to ``path``; upstream code needs real file descriptors."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "w", encoding="utf-8") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield path
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def run(doc: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="miles-contract-") as tmpname:
        tmp = Path(tmpname)
        spec = doc.get("sandbox") or {}
        sandbox = Sandbox(tmp, spec)
        sandbox.materialize(spec)
        _set_env(doc.get("env") or {}, sandbox, tmp)
        argv = _rewrite_hf_checkpoint([sandbox.inward(a) for a in doc["argv"]], doc.get("hfConfigDir"))
        sys.argv = ["train.py", *argv]
        os.chdir(tmp)  # relative paths upstream creates (tensorboard_log/...) land in tmp

        result: dict[str, Any] = {
            "ok": False,
            "stage": "import",
            "error": None,
            "errorType": None,
            "where": None,
        }
        args: Any = None
        error_exc: BaseException | None = None
        cwd = os.getcwd()
        with _captured_output(tmp / "output.log") as captured:
            try:
                _fake_cuda_device(doc.get("device", {"major": 9, "minor": 0}))
                from miles.utils.arguments import parse_args

                result["stage"] = "parse"
                args = parse_args()
                if doc.get("runtimeChecks", True):
                    result["stage"] = "runtime-checks"
                    _runtime_checks(args)
                if doc.get("tracking", True) and getattr(args, "use_tensorboard", False):
                    result["stage"] = "tracking"
                    from miles.utils.tracking_utils.base import TensorboardBackend

                    backend = TensorboardBackend()
                    backend.init(args, primary=True)
                    backend.finish()
                result["stage"] = "done"
                result["ok"] = True
            except (Exception, SystemExit) as exc:  # argparse exits through SystemExit
                result["errorType"] = type(exc).__name__
                if not isinstance(exc, SystemExit):
                    traceback.print_exc()
                error_exc = exc
                result["where"] = _where(exc)
        os.chdir(cwd)
        text = captured.read_text(encoding="utf-8", errors="replace")
        text = text.replace(str(sandbox.root), "")  # report paths as the document wrote them
        if error_exc is not None:
            result["error"] = _error_message(error_exc, text).replace(str(sandbox.root), "")
        log = [
            line
            for line in text.splitlines()
            if line.strip() and (not line.startswith("  ") or "File" in line)
        ]
        result["log"] = log[-40:]
        if args is not None:
            fields = list(DEFAULT_FIELDS) + [f for f in doc.get("fields", []) if f not in DEFAULT_FIELDS]
            result["args"] = {
                f: _jsonable(sandbox.outward(getattr(args, f))) for f in fields if hasattr(args, f)
            }
        return bool(result["ok"]), result


class Terminated(BaseException):
    """SIGTERM arrived: a stopped Ray job (the testbed's train.py runs this parser). Not an Exception nor a
    SystemExit, so no parse-error handler takes it for upstream's refusal; it leaves through the `with`
    blocks, and the scratch directory goes too."""


def _raise_terminated(_signum: int, _frame: Any) -> None:
    raise Terminated


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        doc = _load_document(argv)
    except (InputError, OSError, json.JSONDecodeError) as exc:
        print(json.dumps({"ok": False, "stage": "input", "error": str(exc), "errorType": type(exc).__name__}))
        return 2
    try:
        ok, result = run(doc)
    except Terminated:
        return 128 + signal.SIGTERM
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
