"""Testbed stand-in: print the model args of a miles profile as one line (no real miles here)."""

import sys

PROFILES = {"qwen3-4B", "qwen3-30B-A3B", "glm4-9B", "qwen3-8B", "qwen3-1.7B", "qwen3-0.6B"}


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
    print(
        "--swiglu --num-layers 2 --hidden-size 64 --ffn-hidden-size 256 --num-attention-heads 4 "
        "--group-query-attention --num-query-groups 2 --use-rotary-position-embeddings "
        "--disable-bias-linear --normalization RMSNorm --norm-epsilon 1e-6 --rotary-base 1000000 "
        "--vocab-size 1024 --kv-channels 16 --qk-layernorm"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
