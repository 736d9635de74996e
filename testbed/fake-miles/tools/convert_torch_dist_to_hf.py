"""Testbed stand-in for miles' tools/convert_torch_dist_to_hf.py (the exporter): the same command line, and a
REAL conversion of the testbed's torch_dist checkpoints to Hugging Face safetensors.

Upstream (radixark/miles v0.1.0 = 78527b9, and main at 31f1ca9; the file is the same) takes ``--input-dir``
(an ``iter_NNNNNNN`` directory, required), ``--output-dir`` (required; refused when it exists, unless
``-f``/``--force``), ``--origin-hf-dir`` (copies every other file of the base model: config, tokenizer, ...),
``--model-name`` (one of the two must be given), ``--chunk-size`` (bytes per safetensors file, default 5 GiB)
and ``--vocab-size`` (cuts the vocabulary padding off the embedding and output layer). It loads the model's
tensors from the checkpoint (optimizer state skipped) into host memory in one process, maps Megatron names to
the model's HF names, and writes ``model-0000i-of-0000n.safetensors`` (i from 0) files and
``model.safetensors.index.json`` (``metadata.total_size``, ``weight_map``).

This stand-in does the same for the tensors the testbed's test converter (``dcp_converter.py``) writes and
the testbed's trainer copies into each saved iteration: the stacked layers are split per layer, the fused
QKV into q/k/v, padding removed, the output layer dropped when the config ties it to the embedding; dtypes
are kept. It needs torch and safetensors only (the miles stand-in image carries both).

Test knobs (environment): ``HF_EXPORTER_PAUSE_AT`` = ``loaded`` | ``written`` stops after the checkpoint is
read (nothing written) or after the weights are written (assets not yet copied), prints
``hf_exporter: paused at <phase>`` and waits until the file named by ``HF_EXPORTER_RELEASE`` exists (for
ever when unset: the test kills it there); ``HF_EXPORTER_FAULT`` = ``drop-tensor`` | ``wrong-shape`` plants
a defect the exporter's validation must name.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

MEGATRON_TO_HF = {
    "embedding.word_embeddings.weight": "model.embed_tokens.weight",
    "decoder.final_layernorm.weight": "model.norm.weight",
    "output_layer.weight": "lm_head.weight",
}
PER_LAYER = {
    "decoder.layers.self_attention.linear_proj.weight": "self_attn.o_proj.weight",
    "decoder.layers.mlp.linear_fc1.weight": "mlp.up_proj.weight",
}
QKV = "decoder.layers.self_attention.linear_qkv.weight"
VOCAB_PADDED = {"embedding.word_embeddings.weight", "output_layer.weight"}


def pause_at(phase: str) -> None:
    if os.environ.get("HF_EXPORTER_PAUSE_AT") != phase:
        return
    print(f"hf_exporter: paused at {phase}", flush=True)
    release = os.environ.get("HF_EXPORTER_RELEASE")
    while not (release and Path(release).exists()):
        time.sleep(0.01)


def load_model_tensors(input_dir: Path) -> dict[str, Any]:
    import torch
    import torch.distributed.checkpoint as dcp

    metadata = dcp.FileSystemReader(str(input_dir)).read_metadata()
    state: dict[str, Any] = {}
    for name, meta in metadata.state_dict_metadata.items():
        if "optimizer" in name or "_state" in name or not hasattr(meta, "size"):
            continue
        state[name] = torch.empty(meta.size, dtype=meta.properties.dtype)
    dcp.load(state, storage_reader=dcp.FileSystemReader(str(input_dir)), no_dist=True)
    return state


def to_hf(state: dict[str, Any], config: dict[str, Any], vocab_size: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, loaded in state.items():
        tensor = loaded[:vocab_size] if vocab_size and name in VOCAB_PADDED else loaded
        if name == "output_layer.weight" and config.get("tie_word_embeddings"):
            continue
        if name in MEGATRON_TO_HF:
            out[MEGATRON_TO_HF[name]] = tensor
        elif name in PER_LAYER:
            for i, layer in enumerate(tensor):
                out[f"model.layers.{i}.{PER_LAYER[name]}"] = layer
        elif name == QKV:
            for i, layer in enumerate(tensor):
                for part, piece in zip("qkv", layer.chunk(3), strict=True):
                    out[f"model.layers.{i}.self_attn.{part}_proj.weight"] = piece
        else:
            raise SystemExit(f"convert_torch_dist_to_hf.py (testbed): no HF name for the tensor {name!r}")
    return {k: v.contiguous() for k, v in out.items()}


def save(tensors: dict[str, Any], output_dir: Path, chunk_size: int) -> None:
    from safetensors.torch import save_file

    chunks: list[dict[str, Any]] = [{}]
    current = total = 0
    for name, tensor in tensors.items():
        size = tensor.numel() * tensor.element_size()
        if chunks[-1] and current + size > chunk_size:
            chunks.append({})
            current = 0
        chunks[-1][name] = tensor
        current += size
        total += size
    index: dict[str, Any] = {"metadata": {"total_size": total}, "weight_map": {}}
    names = [f"model-{i:05d}-of-{len(chunks):05d}.safetensors" for i in range(len(chunks))]
    for filename, chunk in zip(names, chunks, strict=True):
        index["weight_map"].update(dict.fromkeys(chunk, filename))
    (output_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    for filename, chunk in zip(names, chunks, strict=True):
        started = time.monotonic()
        save_file(chunk, str(output_dir / filename))
        print(f"{filename} saved in {time.monotonic() - started:.2f} sec.", flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model-name", default=None)
    p.add_argument("--input-dir", required=True)
    p.add_argument("--output-dir", required=True)
    p.add_argument("--origin-hf-dir", default=None)
    p.add_argument("-f", "--force", action="store_true")
    p.add_argument("--chunk-size", type=int, default=5 * 1024**3)
    p.add_argument("--vocab-size", type=int, default=None)
    a = p.parse_args()
    output = Path(a.output_dir)
    if output.exists() and not a.force:
        raise ValueError(f"Output directory {output} already exists. Use --force to overwrite it.")
    if a.model_name is None and a.origin_hf_dir is None:
        raise ValueError("Either --model-name or --origin-hf-dir must be provided")
    config = json.loads((Path(a.origin_hf_dir) / "config.json").read_text()) if a.origin_hf_dir else {}
    print(f"loading model from {a.input_dir}", flush=True)
    started = time.monotonic()
    state = load_model_tensors(Path(a.input_dir))
    print(f"model loaded in {time.monotonic() - started:.2f} sec.", flush=True)
    pause_at("loaded")
    tensors = to_hf(state, config, a.vocab_size)
    fault = os.environ.get("HF_EXPORTER_FAULT", "")
    if fault == "drop-tensor":
        tensors.pop(sorted(tensors)[-1])
    elif fault == "wrong-shape":
        name = sorted(tensors)[0]
        tensors[name] = tensors[name][:-1].contiguous()
    output.mkdir(parents=True, exist_ok=True)
    save(tensors, output, a.chunk_size)
    pause_at("written")
    if a.origin_hf_dir:
        for src in sorted(Path(a.origin_hf_dir).iterdir()):
            if src.name == "model.safetensors.index.json" or src.name.endswith(".safetensors"):
                continue
            if src.is_file():
                print(f"copy from {src} to {output / src.name}", flush=True)
                shutil.copy(src, output / src.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
