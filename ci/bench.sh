#!/usr/bin/env bash
# make bench: every benchmark that runs on this machine; each writes its figures to tests/bench/results/.
# The GPU comparison (tests/bench/gpu/run.sh) needs H200s and runs on the device machine, not here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
echo "== testbed: helm install -> job submitted, hook shares, wait-ready API requests, helm template at scale"
python3 tests/bench/testbed/bench.py
echo "== reward service: in-process loop vs /score/batch vs /score, overload, pathological inputs"
stamp=$(date -u +%Y%m%dT%H%M)
python3 tests/bench/reward/bench.py --tag "$stamp-realistic"
python3 tests/bench/reward/bench.py --corpus tests/bench/reward/corpus-short.jsonl --tag "$stamp-short"
echo "results: $(ls tests/bench/results | tr '\n' ' ')"
