#!/usr/bin/env python3
"""Seed the testbed's shared storage with a local Hugging Face mirror (no network on the testbed).

Writes ``<fsx>/hub-mirror/models/<repo>/<revision>/``, a tiny model: config.json, a WordLevel tokenizer
``transformers`` loads, and real safetensors weights in two shards with their index (zeros, with the tensor
names, shapes and dtypes the testbed's exporter writes); and ``<fsx>/hub-mirror/datasets/<repo>/<revision>/
<file>.jsonl``, a few miles-style records, for the repos the scenario files use. prepare-data reads it
through ``MILES_HOOKS_SOURCE_DIR`` (set by values/values-local-testbed.yaml), so the real prepare-data code
copies, hashes and marks the files.

Usage: seed.py [--fsx DIR]    (default $FSX_DIR or /tmp/miles-testbed-fsx). Idempotent.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
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


def write(path: Path, data: str | bytes) -> bool:
    """Write ``data`` unless the file holds it already; True when it wrote."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    if path.exists() and path.read_bytes() == data:
        return False
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return True


def safetensors_bytes(tensors: dict[str, list[int]]) -> bytes:
    """A safetensors file of bf16 zeros (the format: an 8-byte little-endian header length, the JSON header
    naming each tensor's dtype, shape and byte range, the data), written without torch: the demo seeds with
    the machine's python3."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors.items():
        size = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + bytes(offset)


def base_tensors(vocab: int, hidden: int, layers: int) -> dict[str, list[int]]:
    """The HF tensors of the test model (tied embeddings, so no lm_head)."""
    out = {"model.embed_tokens.weight": [vocab, hidden], "model.norm.weight": [hidden]}
    for i in range(layers):
        for proj in ("q", "k", "v", "o"):
            out[f"model.layers.{i}.self_attn.{proj}_proj.weight"] = [hidden, hidden]
        out[f"model.layers.{i}.mlp.up_proj.weight"] = [4 * hidden, hidden]
    return out


def tokenizer_json() -> dict[str, Any]:
    """A whitespace WordLevel tokenizer (the tokenizers library's own JSON format)."""
    special = ["<unk>", "<|endoftext|>"]
    words = special + [str(i) for i in range(100)] + ["What", "is", "+", "?", "=", "The", "answer"]
    added = [
        {
            "id": i,
            "content": w,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, w in enumerate(special)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(words)}, "unk_token": "<unk>"},
    }


def write_weights(d: Path, vocab: int, hidden: int, layers: int) -> bool:
    tensors = base_tensors(vocab, hidden, layers)
    names = list(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:2], "model-00002-of-00002.safetensors": names[2:]}
    weight_map = {}
    changed = False
    for filename, part in shards.items():
        changed |= write(d / filename, safetensors_bytes({n: tensors[n] for n in part}))
        weight_map.update(dict.fromkeys(part, filename))
    total = sum(2 * math.prod(shape) for shape in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    changed |= write(d / "model.safetensors.index.json", json.dumps(index, indent=2) + "\n")
    old = d / "model.safetensors"  # the single placeholder blob older seeds wrote
    if old.exists():
        old.unlink()
        changed = True
    return changed


def prepared_from_another_mirror(hf_path: Path, mirror_dir: Path) -> bool:
    """Whether prepare-data's marker in ``hf_path`` lists other files than the mirror holds now."""
    try:
        marker = json.loads((hf_path / ".miles-hooks-prepared.json").read_text())
    except (OSError, ValueError):
        return False
    recorded = {(f.get("name"), f.get("size")) for f in marker.get("files") or [] if isinstance(f, dict)}
    mirrored = {
        (str(p.relative_to(mirror_dir)), p.stat().st_size) for p in mirror_dir.rglob("*") if p.is_file()
    }
    return recorded != mirrored


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
        changed = write(d / "config.json", json.dumps(config, indent=1) + "\n")
        tokenizer_config = {
            "model_max_length": 4096,
            "tokenizer_class": "PreTrainedTokenizerFast",
            "unk_token": "<unk>",
            "eos_token": "<|endoftext|>",
        }
        changed |= write(d / "tokenizer_config.json", json.dumps(tokenizer_config) + "\n")
        changed |= write(d / "tokenizer.json", json.dumps(tokenizer_json(), indent=1) + "\n")
        changed |= write(d / "generation_config.json", json.dumps({"temperature": 0.6}) + "\n")
        changed |= write_weights(d, vocab, hidden, layers)
        name = repo.split("/")[1]
        if changed or prepared_from_another_mirror(fsx / "models" / name, d):
            # the mirror changed under the same revision (a newer seed): what prepare-data and the converter
            # made of the old one (the scenarios' model.hfPath and torchDistPath) would pass their fast paths
            for made in (fsx / "models" / name, fsx / "models" / f"{name}_torch_dist"):
                shutil.rmtree(made, ignore_errors=True)
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
    (written by the testbed's test converter with the real completion marker, so the convert hook takes its
    "already converted" fast path and installs stay quick, and the trainer's checkpoints carry real tensors
    for the exporter; test_real_convert.py seeds nothing of this and has the convert hook convert)."""
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
    placeholder = target / "release" / ".metadata"  # what earlier versions of this seed published
    if (
        convert.published_mismatch(target, source) is None
        and placeholder.read_bytes() != b"testbed placeholder"
    ):
        return
    tmp = target.with_name(f".{target.name}.seed-{os.getpid()}")
    converter = Path(__file__).resolve().parents[2] / "testbed" / "fake-miles" / "tools" / "dcp_converter.py"
    subprocess.run(
        [sys.executable, str(converter), "--hf-checkpoint", raw["model"]["hfPath"], "--save", str(tmp)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
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
