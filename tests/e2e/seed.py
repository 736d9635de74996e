#!/usr/bin/env python3
"""Seed the testbed's shared storage with a local Hugging Face mirror (no network on the testbed).

Writes ``<fsx>/hub-mirror/models/<repo>/<revision>/`` (a tiny model: config.json, tokenizer files, one
safetensors-sized blob) and ``<fsx>/hub-mirror/datasets/<repo>/<revision>/<file>.jsonl`` (a few miles-style
records) for the repos the scenario files use. prepare-data reads it through ``MILES_HOOKS_SOURCE_DIR``
(set by values/values-local-testbed.yaml), so the real prepare-data code copies, hashes and marks the files.

Usage: seed.py [--fsx DIR]    (default $FSX_DIR or /tmp/miles-testbed-fsx). Idempotent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

MODELS = {
    # repo id -> (vocab, hidden, layers); scaled-down shapes keep the files tiny.
    "Qwen/Qwen3-4B": (1024, 64, 2),
    "Qwen/Qwen3-30B-A3B": (1024, 64, 2),
    "zai-org/GLM-Z1-9B-0414": (1024, 64, 2),
}
DATASETS = {
    "zhuzilin/dapo-math-17k": "dapo-math-17k.jsonl",
    "zhuzilin/aime-2024": "aime-2024.jsonl",
}


def write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    if path.exists() and path.read_bytes() == data:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def seed(fsx: Path, revision: str = "main") -> Path:
    mirror = fsx / "hub-mirror"
    for repo, (vocab, hidden, layers) in MODELS.items():
        d = mirror / "models" / repo / revision
        config = {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "vocab_size": vocab,
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": hidden // 4,
            "intermediate_size": 4 * hidden,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000,
            "tie_word_embeddings": True,
            "max_position_embeddings": 4096,
            "torch_dtype": "bfloat16",
        }
        write(d / "config.json", json.dumps(config, indent=1) + "\n")
        write(d / "tokenizer_config.json", json.dumps({"model_max_length": 4096}) + "\n")
        write(d / "generation_config.json", json.dumps({"temperature": 0.6}) + "\n")
        write(d / "model.safetensors", b"\0" * 4096)
    for repo, name in DATASETS.items():
        rows = [
            {"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "label": str(2 * i)}
            for i in range(16)
        ]
        write(mirror / "datasets" / repo / revision / name, "".join(json.dumps(r) + "\n" for r in rows))
    return mirror


def publish_converted(raw: dict[str, Any], mirror: Path) -> None:
    """Make the run's inputs ready on the shared storage, as a previous install would have left them:
    prepare-data (the real library code, from the local mirror) and a published torch_dist checkpoint
    (a placeholder with the converter's layout and the real completion marker, so the convert hook takes its
    "already converted" fast path and installs stay quick; test_real_convert.py seeds nothing of this and
    has the convert hook run a real conversion with the test converter)."""
    from miles_hooks.core import fsutil
    from miles_hooks.core import runspec as spec
    from miles_hooks.steps import convert, prepare_data

    # the files only: the image's version report is the hook's own (a pod on the cluster), as is its record
    seeded = {
        **raw,
        "prepare": {**raw["prepare"], "imageFacts": {**raw["prepare"]["imageFacts"], "enabled": False}},
    }
    rs = spec.parse(json.dumps(seeded), "testbed seed")
    prepare_data.run(rs, source_dir=str(mirror))
    if raw["model"]["trainBackend"] != "megatron":
        return
    target = Path(raw["model"]["torchDistPath"])
    source = convert.source_identity(raw)
    if convert.published_mismatch(target, source) is None:
        return
    tmp = target.with_name(f".{target.name}.seed-{os.getpid()}")
    (tmp / "release").mkdir(parents=True, exist_ok=True)
    (tmp / "release" / ".metadata").write_bytes(b"testbed placeholder")
    (tmp / "release" / "__0_0.distcp").write_bytes(b"\0" * 1024)
    (tmp / "release" / "common.pt").write_bytes(b"\0" * 64)
    (tmp / convert.ITERATION_FILE).write_text("release\n")
    marker = {
        "kind": convert.MARKER_KIND,
        "version": 1,
        "source": source,
        "files": convert.listed_files(tmp),
        "tensors": 0,
        "convertedAt": "testbed-seed",
    }
    fsutil.atomic_write_json(tmp / convert.MARKER, marker)
    if target.exists():
        import shutil

        shutil.rmtree(target)
    os.rename(tmp, target)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fsx", type=Path, default=Path(os.environ.get("FSX_DIR") or "/tmp/miles-testbed-fsx"))
    ap.add_argument(
        "--publish-converted",
        action="store_true",
        help="also prepare the inputs of the release rendered from the helm args after `--` "
        "and publish its converted checkpoint",
    )
    ap.add_argument(
        "--publish-spec",
        type=Path,
        help="prepare the inputs of this run spec (JSON) and publish its converted checkpoint, reading the "
        "mirror at <storage.mountPath>/hub-mirror: run where the pods see the storage "
        "(harness.on_shared_storage)",
    )
    ap.add_argument("--release", default="miles")
    ap.add_argument("--namespace", default="default")
    ap.add_argument("helm_args", nargs="*", help="-f values files (after --)")
    args = ap.parse_args(argv)
    if not args.fsx.is_absolute():
        print(f"seed.py: --fsx must be an absolute path, got {args.fsx}", file=sys.stderr)
        return 2
    if args.publish_spec:
        raw = json.loads(args.publish_spec.read_text())
        publish_converted(raw, Path(raw["storage"]["mountPath"]) / "hub-mirror")
        return 0
    mirror = seed(args.fsx)
    print(mirror)
    if args.publish_converted:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import harness

        values = [Path(a) for a in args.helm_args if a != "-f"]
        missing = [str(v) for v in values if not v.is_file()]
        if missing:
            print(f"seed.py: values file(s) not found: {', '.join(missing)}", file=sys.stderr)
            return 2
        harness.publish_converted(harness.rendered_spec(values, args.release, args.namespace))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
