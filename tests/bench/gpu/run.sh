#!/usr/bin/env bash
# One device run (nvidia-h200-x2): build nccl-tests from the ignored source folder .nccl-tests/
# (carried, never committed), then tests/bench/gpu/compare.py. Results go to $OUT (default /tmp/gpu-bench).
set -euo pipefail
cd "$(dirname "$0")/../../.."
# NVLink multicast stays off on the lent machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-bench}
PY=${PYTHON:-python3}
NGPUS=$($PY -c 'import torch; print(torch.cuda.device_count())')
# NCCL of torch's wheel: headers + library; nccl-tests links -lnccl, the wheel ships only libnccl.so.2
NCCL_PKG=$($PY -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
NCCL_HOME=/tmp/nccl-home
mkdir -p $NCCL_HOME/lib
ln -sfn "$NCCL_PKG/include" $NCCL_HOME/include
ln -sf "$NCCL_PKG/lib/libnccl.so.2" $NCCL_HOME/lib/libnccl.so
if [ -z "${CUDA_HOME:-}" ]; then
  if command -v nvcc >/dev/null; then CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")"); else CUDA_HOME=/usr/local/cuda; fi
fi
export PATH="$CUDA_HOME/bin:$PATH"
BUILD=/tmp/nccl-tests-build
t0=$(date +%s)
make -s -C .nccl-tests/src -j 32 BUILDDIR=$BUILD NCCL_HOME=$NCCL_HOME CUDA_HOME="$CUDA_HOME" \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BIN_FILES_LIST="all_reduce sendrecv" >/dev/null
echo "nccl-tests built in $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH="$NCCL_PKG/lib:${LD_LIBRARY_PATH:-}"
$PY tests/bench/gpu/compare.py --nccl-tests-bin $BUILD --out "$OUT" --ngpus "$NGPUS"
