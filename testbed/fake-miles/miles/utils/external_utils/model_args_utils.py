"""Testbed stand-in: print the model args of a miles profile as one line (no real miles here)."""

import sys

PROFILES = {"qwen3-4B", "qwen3-30B-A3B", "glm4-9B", "qwen3-8B", "qwen3-1.7B", "qwen3-0.6B"}
MOE_PROFILES = {"qwen3-30B-A3B"}


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: model_args_utils.py <profile>", file=sys.stderr)
        return 2
    profile = sys.argv[1]
    if profile not in PROFILES:
        print(
            f"unknown model profile {profile!r} (testbed stand-in knows {sorted(PROFILES)})", file=sys.stderr
        )
        return 2
    # upstream's qwen3 profile flags with the tiny shapes of the testbed's config.json (tests/e2e/seed.py),
    # so miles' own hf_validate_args accepts them in the stand-in train.py
    args = (
        "--swiglu --num-layers 2 --hidden-size 64 --ffn-hidden-size 256 --num-attention-heads 4 "
        "--group-query-attention --num-query-groups 2 --use-rotary-position-embeddings "
        "--disable-bias-linear --normalization RMSNorm --norm-epsilon 1e-6 --rotary-base 1000000 "
        "--vocab-size 1024 --kv-channels 16 --qk-layernorm"
    )
    if profile in MOE_PROFILES:  # upstream's MoE flags; 8 experts divide every EP the scenarios use
        args += (
            " --moe-ffn-hidden-size 32 --moe-router-score-function softmax"
            " --moe-token-dispatcher-type alltoall --moe-router-topk 2 --moe-layer-freq [1,1]"
            " --num-experts 8 --moe-grouped-gemm --moe-token-drop-policy probs --moe-router-dtype fp32"
            " --moe-permute-fusion --moe-aux-loss-coeff 0"
        )
    print(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
