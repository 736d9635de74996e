"""One training step of a tiny Qwen3-MoE-shaped GPT with real Megatron (megatron-core), in the parallel
layout of a rendered run spec. Run under torchrun, one process per GPU:

    torchrun --nproc-per-node N tests/gpu/moe_step.py --spec run.json [--layout spec|single]
             [--sequence-parallel spec|off] --out result.json

``--layout spec`` takes tensor, expert, expert-tensor and sequence parallelism from the spec's
``topology`` (run it on as many GPUs as that layout spans); ``single`` runs the same model on one GPU
(TP 1, EP 1). The model keeps the profile's attention heads, query groups, expert
count and top-k routing from ``model.architecture`` and the profile (Qwen3-30B-A3B routes to 8 of 128
experts), with two layers and small hidden sizes. Rank 0 writes what happened as JSON; a Megatron
exception is reported with its message, not swallowed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROUTER_TOP_K = {"qwen3-30B-A3B": 8, "qwen3-235B-A22B": 8}


def layout(spec: dict[str, Any], mode: str, sequence_parallel: str) -> dict[str, Any]:
    topo = spec["topology"]
    if mode == "single":
        out = {"tp": 1, "ep": 1, "etp": 1, "sp": False}
    else:
        out = {
            "tp": topo["tensorParallel"],
            "ep": topo["expertParallel"],
            "etp": topo["expertTensorParallel"],
            "sp": topo["sequenceParallel"],
        }
    if sequence_parallel == "off":
        out["sp"] = False
    return out


def step(spec: dict[str, Any], lay: dict[str, Any]) -> dict[str, Any]:
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    arch = spec["model"]["architecture"]
    ps.initialize_model_parallel(
        tensor_model_parallel_size=lay["tp"],
        expert_model_parallel_size=lay["ep"],
        expert_tensor_parallel_size=lay["etp"],
    )
    model_parallel_cuda_manual_seed(1234)
    experts = int(arch["numExperts"])
    config = TransformerConfig(
        num_layers=2,
        hidden_size=256,
        num_attention_heads=int(arch["numAttentionHeads"]),
        num_query_groups=int(arch["numQueryGroups"]),
        kv_channels=16,
        ffn_hidden_size=512,
        num_moe_experts=experts,
        moe_router_topk=ROUTER_TOP_K.get(spec["model"]["profile"], 2),
        moe_ffn_hidden_size=32,
        moe_token_dispatcher_type="alltoall",
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=1e-3,
        moe_grouped_gemm=False,
        tensor_model_parallel_size=lay["tp"],
        expert_model_parallel_size=lay["ep"],
        expert_tensor_parallel_size=lay["etp"],
        sequence_parallel=lay["sp"],
        normalization="RMSNorm",
        gated_linear_unit=True,
        activation_func=torch.nn.functional.silu,
        add_bias_linear=False,
        qk_layernorm=True,
        bf16=True,
        params_dtype=torch.bfloat16,
    )
    layer_spec = get_gpt_layer_local_spec(
        num_experts=experts, moe_grouped_gemm=False, qk_layernorm=True, normalization="RMSNorm"
    )
    vocab, seq, batch = 1024, 128, 4
    model = GPTModel(
        config=config,
        transformer_layer_spec=layer_spec,
        vocab_size=vocab,
        max_sequence_length=seq,
        position_embedding_type="rope",
    ).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator(device="cuda").manual_seed(7)  # the same batch on every rank
    tokens = torch.randint(0, vocab, (batch, seq), device="cuda", generator=gen)
    positions = torch.arange(seq, device="cuda").unsqueeze(0).expand(batch, seq)
    labels = torch.roll(tokens, -1, dims=1)
    model.train()
    started = time.monotonic()
    loss = model(tokens, positions, None, labels=labels).float().mean()
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    nonzero = sum(int(bool(g.abs().sum() > 0)) for g in grads)
    expert_grads = [p.grad for n, p in model.named_parameters() if ".experts." in n and p.grad is not None]
    optimizer.step()
    torch.cuda.synchronize()
    return {
        "loss": float(loss.item()),
        "lossFinite": math.isfinite(float(loss.item())),
        "params": sum(1 for _ in model.parameters()),
        "paramsWithGrad": len(grads),
        "paramsWithNonzeroGrad": nonzero,
        "expertParamsWithNonzeroGrad": sum(int(bool(g.abs().sum() > 0)) for g in expert_grads),
        "seconds": round(time.monotonic() - started, 3),
        "experts": experts,
        "routerTopK": config.moe_router_topk,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True)
    parser.add_argument("--layout", choices=["spec", "single"], default="spec")
    parser.add_argument("--sequence-parallel", choices=["spec", "off"], default="spec")
    parser.add_argument("--out", required=True)
    a = parser.parse_args()
    import torch
    import torch.distributed as dist

    spec = json.loads(Path(a.spec).read_text())
    lay = layout(spec, a.layout, a.sequence_parallel)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    result: dict[str, Any] = {"layout": lay, "worldSize": dist.get_world_size(), "ok": False}
    try:
        import megatron.core

        result["versions"] = {
            "megatron-core": megatron.core.__version__,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(),
        }
        result.update(step(spec, lay))
        result["ok"] = bool(result["lossFinite"] and result["paramsWithNonzeroGrad"] > 0)
    except Exception as exc:  # reported as Megatron said it
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["where"] = traceback.format_exc().strip().splitlines()[-3:]
    if dist.get_rank() == 0:
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    dist.destroy_process_group()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
