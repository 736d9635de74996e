#!/usr/bin/env bash
# Launch modes other than the default spawn, on one 2-GPU host (device run):
#  (a) torchrun, one node, one process per GPU;
#  (b) two torchrun "nodes" on this host, one GPU each (CUDA_VISIBLE_DEVICES, MILES_NODE_NAME),
#      which exercises the cross-node all-reduce and node-pair send/recv code;
#  (c) the verify hook's entry point, check_node(num_nodes=2, node_rank=r, ...), from two processes.
# Figures from (b)/(c) are not cross-node figures (both "nodes" share one NVLink host).
set -uo pipefail
cd "$(dirname "$0")/../../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/hooks/src${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-/tmp/gpu-smoke}
PY=${PYTHON:-python3}
QUICK=(--sizes 1M:2G:4 --no-plot)
mkdir -p "$OUT"
echo "== (a) torchrun --nproc-per-node 2"
$PY -m torch.distributed.run --standalone --nproc-per-node 2 -m miles_hooks gpu-check --expected-gpus 2 \
  --out-dir /tmp/smoke-a "${QUICK[@]}"
ra=$?; echo "(a) exit $ra"
cp /tmp/smoke-a/gpu-check.json "$OUT/torchrun.json"

echo "== (b) two torchrun nodes x 1 GPU"
for r in 0 1; do
  CUDA_VISIBLE_DEVICES=$r MILES_NODE_NAME=node$r $PY -m torch.distributed.run --nnodes 2 --node-rank $r \
    --nproc-per-node 1 --master-addr 127.0.0.1 --master-port 29511 -m miles_hooks gpu-check \
    --expected-gpus 1 --xnode-allreduce-gbps 1 --xnode-sendrecv-gbps 1 --out-dir /tmp/smoke-b$r "${QUICK[@]}" \
    > "/tmp/smoke-b$r.log" 2>&1 &
done
rb=0; for j in $(jobs -p); do wait "$j" || rb=$?; done
cat /tmp/smoke-b0.log; tail -5 /tmp/smoke-b1.log
echo "(b) exit $rb"
cp /tmp/smoke-b0/gpu-check.json "$OUT/xnode-torchrun.json"

echo "== (c) check_node(num_nodes=2)"
for r in 0 1; do
  CUDA_VISIBLE_DEVICES=$r MILES_NODE_NAME=pod$r $PY - "$r" > "/tmp/smoke-c$r.log" 2>&1 <<'PYEOF' &
import json, sys
from miles_hooks.core.gpu import check_node
r = int(sys.argv[1])
flags = {"expected_gpus": 1, "sizes": "1M:2G:4", "no_plot": True, "out_dir": f"/tmp/smoke-c{r}"}
rep = check_node(overrides=flags, num_nodes=2, node_rank=r, master_addr="127.0.0.1", master_port=29522)
json.dumps(rep)
print("node_rank", r, "exit_code", rep["exit_code"], "nodes", [n["name"] for n in rep["nodes"]],
      "sendrecv", [(s["scope"], s["label"], round(s["figure_gbps"] or 0, 1)) for s in rep["sendrecv"]])
print(rep["verdict"])
sys.exit(rep["exit_code"])
PYEOF
done
rc=0; for j in $(jobs -p); do wait "$j" || rc=$?; done
tail -n 4 /tmp/smoke-c0.log /tmp/smoke-c1.log
echo "(c) exit $rc"
cp /tmp/smoke-c1/gpu-check.json "$OUT/xnode-check-node.json"
exit $(( ${ra:-0} | rb | rc ))
