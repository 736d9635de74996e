"""A Hugging Face sequence-classification model on CPU as the reward: the score is the first logit.

Runs inside a worker process; each worker loads the model once (weights are memory-mapped from
safetensors, so workers share the page cache) and uses one intra-op thread, since parallelism comes
from the worker processes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from miles_reward.outcome import Failed, Outcome, Sample, Scored

_model: Any = None
_tokenizer: Any = None
_max_length: int = 512


def load(model_path: Path) -> None:
    global _model, _tokenizer, _max_length
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.set_num_threads(1)
    _tokenizer = AutoTokenizer.from_pretrained(str(model_path), local_files_only=True)
    _model = AutoModelForSequenceClassification.from_pretrained(
        str(model_path), local_files_only=True
    )
    _model.eval()
    limit = getattr(_model.config, "max_position_embeddings", None)
    tok_limit = getattr(_tokenizer, "model_max_length", None)
    candidates = [v for v in (limit, tok_limit) if isinstance(v, int) and 0 < v < 1_000_000]
    _max_length = min(candidates) if candidates else 512


def _encode(sample: Sample) -> Any:
    tok = _tokenizer
    if isinstance(sample.prompt, str):
        conversation = [{"role": "user", "content": sample.prompt}]
        prompt_text = sample.prompt
    else:
        conversation = [{"role": role, "content": content} for role, content in sample.prompt]
        prompt_text = "\n".join(content for _, content in sample.prompt)
    if getattr(tok, "chat_template", None):
        messages = [*conversation, {"role": "assistant", "content": sample.response}]
        text = tok.apply_chat_template(messages, tokenize=False)
        return tok(text, return_tensors="pt", truncation=True, max_length=_max_length)
    return tok(
        prompt_text,
        sample.response,
        return_tensors="pt",
        truncation="longest_first",
        max_length=_max_length,
    )


def score(sample: Sample) -> Outcome:
    import torch

    if _model is None:
        return Failed("internal_error", "reward model is not loaded")
    inputs = _encode(sample)
    with torch.inference_mode():
        logits = _model(**inputs).logits
    value = float(logits[0, 0])
    if not math.isfinite(value):
        return Failed("internal_error", f"reward model produced a non-finite score ({value})")
    return Scored(value)


def warm_up() -> None:
    score(Sample("warm-up", "warm-up", None))
