"""The reward_model backend with a tiny, randomly initialised BERT classifier built here."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reward_http import Service, sample, start_service

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
    reason="reward_model backend needs torch and transformers (not installed in this venv)",
)

WORDS = ["what", "is", "the", "answer", "so", "boxed", "frac", "sum", "of", "and"]


def build_tiny_model(directory: Path) -> None:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789+-*/=^{}()$\\.,?")
    vocab = specials + WORDS + chars + [f"##{c}" for c in chars]
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizer(vocab_file=str(directory / "vocab.txt")).save_pretrained(directory)
    torch.manual_seed(1234)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=128,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(directory)


def reference_score(directory: Path, prompt: str, response: str) -> float:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok: Any = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    model: Any = AutoModelForSequenceClassification.from_pretrained(
        str(directory), local_files_only=True
    )
    model.eval()
    inputs = tok(prompt, response, return_tensors="pt", truncation="longest_first", max_length=128)
    with torch.inference_mode():
        return float(model(**inputs).logits[0, 0])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-rm")
    build_tiny_model(directory)
    return directory


@pytest.fixture(scope="module")
def rm_service(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    log = tmp_path_factory.mktemp("rm") / "service.log"
    svc = start_service(
        {
            "REWARD_BACKEND": "reward_model",
            "REWARD_MODEL_PATH": str(model_dir),
            "REWARD_WORKERS": "1",
            "REWARD_TIMEOUT_SECONDS": "30",
        },
        log,
    )
    yield svc
    svc.stop()


def test_score_is_the_models_logit(rm_service: Service, model_dir: Path) -> None:
    prompt, response = "what is the sum of 2 and 3?", "so the answer is 5."
    reply = rm_service.post("/score", sample(response, None, prompt=prompt))
    assert reply.status == 200, reply.body
    value = reply.json()
    assert isinstance(value, float) and math.isfinite(value)
    assert value == pytest.approx(reference_score(model_dir, prompt, response), abs=1e-5)


def test_different_responses_score_differently(rm_service: Service) -> None:
    a = rm_service.post("/score", sample("so the answer is 5.", "5")).json()
    b = rm_service.post("/score", sample("what? frac boxed 17 and 99", "5")).json()
    assert a != b


def test_long_input_is_truncated_not_failed(rm_service: Service) -> None:
    reply = rm_service.post("/score", sample("the sum of 1 and 2 " * 500, None))
    assert reply.status == 200, reply.body


def test_batch_matches_single_requests(rm_service: Service) -> None:
    items = [sample(f"so the answer is {i}", str(i)) for i in range(8)]
    singles = [rm_service.post("/score", item).json() for item in items]
    batch = rm_service.post("/score/batch", items)
    assert batch.status == 200
    assert batch.json() == pytest.approx(singles, abs=1e-6)
