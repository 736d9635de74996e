#!/usr/bin/env bash
# make test-timing: runs the timing-sensitive test tiers RUNS times in a row, in a random order each
# time, first on a quiet machine and then with both cores kept busy by stress-ng (cpu, vm and io
# stressors, started and stopped here). A test that waits for a guessed time instead of the thing it
# needs fails here long before it fails on somebody else's machine.
#
#   RUNS=10 CONDITIONS="quiet busy" ci/timing-stress.sh [pytest paths...]
#
# Prints one line per run (condition, run, random-order seed, result, seconds) and a summary, writes
# them to tests/bench/results/timing-stress-<UTC date>.md, and exits 1 if any run failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

runs=${RUNS:-10}
conditions=${CONDITIONS:-quiet busy}
tiers=("$@")
((${#tiers[@]})) || tiers=(hooks/tests images/reward-service/tests tests/ray tests/bench_harness)
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "timing-stress: RUNS: expected a positive integer, found '$runs'" >&2; exit 2; }
for c in $conditions; do
  [[ $c == quiet || $c == busy ]] || { echo "timing-stress: CONDITIONS: expected 'quiet' and/or 'busy', found '$c'" >&2; exit 2; }
done

if [[ $conditions == *busy* ]] && ! command -v stress-ng >/dev/null; then
  echo "[timing-stress] installing stress-ng (Debian package)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; }
fi

stress_pid=""
stop_stress() {
  if [[ -n $stress_pid ]]; then
    kill -TERM "$stress_pid" 2>/dev/null || true
    wait "$stress_pid" 2>/dev/null || true
    stress_pid=""
  fi
}
trap stop_stress EXIT

results_dir="$root/tests/bench/results"
mkdir -p "$results_dir"
report="$results_dir/timing-stress-$(date -u +%Y%m%d-%H%M).md"
logs=$(mktemp -d)
{
  echo "# Timing-sensitive tiers, $runs runs per condition, random order"
  echo
  echo "Tiers: ${tiers[*]}. Machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)."
  echo "busy = stress-ng --cpu $(nproc) --vm 1 --vm-bytes 2G --io 1, running for the whole pytest run."
  echo
  echo "| condition | run | seed | result | seconds |"
  echo "|---|---|---|---|---|"
} >"$report"

failed=0
declare -A passes
for condition in $conditions; do
  passes[$condition]=0
  for ((i = 1; i <= runs; i++)); do
    if [[ $condition == busy ]]; then
      stress-ng --cpu "$(nproc)" --vm 1 --vm-bytes 2G --io 1 --quiet &
      stress_pid=$!
    fi
    seed=$((RANDOM * 32768 + RANDOM))
    log="$logs/$condition-$i.log"
    start=$SECONDS
    if "$root/.venv/bin/pytest" -p no:cacheprovider -q --random-order-bucket=module --random-order-seed="$seed" \
      "${tiers[@]}" >"$log" 2>&1; then
      result=passed
      passes[$condition]=$((passes[$condition] + 1))
    else
      result="FAILED ($({ grep -E '^(FAILED|ERROR)' "$log" || tail -n 3 "$log"; } | head -3 | tr '\n' ';'))"
      failed=1
      cp "$log" "$results_dir/timing-stress-failed-$condition-$i.log"
    fi
    stop_stress
    line="| $condition | $i | $seed | $result | $((SECONDS - start)) |"
    echo "[timing-stress] $line"
    echo "$line" >>"$report"
  done
done
{
  echo
  for condition in $conditions; do echo "- $condition: ${passes[$condition]} of $runs passed"; done
} | tee -a "$report"
rm -rf "$logs"
echo "[timing-stress] report: ${report#"$root"/}"
exit "$failed"
