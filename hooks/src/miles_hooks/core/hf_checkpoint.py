"""What a Hugging Face model directory holds, read without torch: the tensor table of its safetensors files
(each file's JSON header), the files ``transformers`` needs beside the weights, and the comparison of an
exported model with the base model it was trained from.

The safetensors format: an 8-byte little-endian header length, then that many bytes of JSON naming each
tensor's ``dtype``, ``shape`` and ``data_offsets`` (plus an optional ``__metadata__``), then the data. A
multi-file model lists its files in ``model.safetensors.index.json`` (``weight_map``: tensor -> file).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from miles_hooks.core.errors import CheckFailed

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
HEADER_LIMIT = 100 << 20  # the safetensors library refuses headers above 100 MB too
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")
# Megatron pads the vocabulary to a multiple of its divisor; the exporter's --vocab-size cuts it off again
VOCAB_TENSORS = ("embed_tokens", "lm_head", "word_embeddings", "output_layer")


@dataclass(frozen=True)
class Tensor:
    dtype: str
    shape: tuple[int, ...]
    file: str


def read_header(path: Path) -> dict[str, Tensor]:
    """The tensors one safetensors file holds; CheckFailed naming the file when it is not one."""
    try:
        with path.open("rb") as fh:
            raw_length = fh.read(8)
            if len(raw_length) < 8:
                raise CheckFailed(f"{path}: expected a safetensors file, found {len(raw_length)} bytes")
            (length,) = struct.unpack("<Q", raw_length)
            if length > HEADER_LIMIT:
                raise CheckFailed(f"{path}: safetensors header of {length} bytes (at most {HEADER_LIMIT})")
            header = json.loads(fh.read(length))
        data_bytes = path.stat().st_size - 8 - length
    except OSError as exc:
        raise CheckFailed(f"{path}: cannot be read: {exc.strerror}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckFailed(f"{path}: the safetensors header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise CheckFailed(f"{path}: the safetensors header is not a JSON object")
    out: dict[str, Tensor] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = (int(x) for x in entry["data_offsets"])
            tensor = Tensor(str(entry["dtype"]), tuple(int(d) for d in entry["shape"]), path.name)
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckFailed(f"{path}: tensor {name!r} has no dtype, shape and data_offsets") from exc
        if end > data_bytes or start > end:
            raise CheckFailed(
                f"{path}: tensor {name!r} needs bytes {start}..{end} of the data, the file holds "
                f"{data_bytes} (a truncated file)"
            )
        out[name] = tensor
    return out


def tensor_table(model_dir: Path) -> dict[str, Tensor]:
    """Every tensor of the model in ``model_dir``, by its index (or its single ``model.safetensors``)."""
    index_path = model_dir / INDEX
    if index_path.is_file():
        try:
            weight_map = json.loads(index_path.read_text("utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckFailed(f"{index_path}: expected JSON with a weight_map, found {exc!r}") from exc
        table: dict[str, Tensor] = {}
        for filename in sorted(set(weight_map.values())):
            held = read_header(model_dir / filename)
            for name, file in weight_map.items():
                if file == filename and name not in held:
                    raise CheckFailed(f"{index_path} maps {name!r} to {filename}, which does not hold it")
            table.update(held)
        unlisted = sorted(set(table) - set(weight_map))
        if unlisted:
            raise CheckFailed(f"{index_path} does not list {', '.join(unlisted[:5])}, which its files hold")
        return table
    if (model_dir / SINGLE).is_file():
        return read_header(model_dir / SINGLE)
    raise CheckFailed(f"{model_dir}: neither {INDEX} nor {SINGLE}: no safetensors weights")


def compare(base: dict[str, Tensor], exported: dict[str, Tensor]) -> list[str]:
    """Each difference between the exported model's tensors and the base model's, naming the tensor."""
    problems = [
        f"{name}: in the base model, missing from the export" for name in sorted(set(base) - set(exported))
    ]
    problems += [
        f"{name}: in the export, not in the base model" for name in sorted(set(exported) - set(base))
    ]
    for name in sorted(set(base) & set(exported)):
        want, got = base[name], exported[name]
        if want.shape != got.shape:
            padded = (
                any(part in name for part in VOCAB_TENSORS)
                and len(got.shape) == len(want.shape)
                and got.shape[0] > want.shape[0]
                and got.shape[1:] == want.shape[1:]
            )
            hint = " (the vocabulary padding is still there: pass --vocab-size)" if padded else ""
            problems.append(f"{name}: shape {list(got.shape)}, the base model's is {list(want.shape)}{hint}")
        if want.dtype != got.dtype:
            problems.append(f"{name}: dtype {got.dtype}, the base model's is {want.dtype}")
    return problems


def missing_assets(model_dir: Path) -> list[str]:
    """What ``transformers`` needs beside the weights and the directory lacks."""
    missing = [] if (model_dir / "config.json").is_file() else ["config.json"]
    if not any((model_dir / name).is_file() for name in TOKENIZER_FILES):
        missing.append(f"a tokenizer file (one of {', '.join(TOKENIZER_FILES)})")
    return missing
