#!/usr/bin/env bash
# Stops every testbed process (each was started in its own session: the whole session is stopped, nothing
# else) and checks that no testbed port is left open. Keeps .tools/cluster/{pki,logs}; removes cluster state.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/config.sh"
source "$here/lib.sh"

# session_pids SID -> pids of the processes in session SID
session_pids() { ps -e -o pid=,sid= | awk -v s="$1" '$2 == s {print $1}'; }

# stop NAME... : SIGTERM every process in the sessions of the recorded components at once, wait up to 10 s for
# all of them, then SIGKILL what is left. Only the sessions we started (pid + start time recorded) are touched.
stop() {
  local name pid st sids=() pids i
  for name in "$@"; do
    local f="$CLUSTER_DIR/run/$name.pid"
    [[ -f $f ]] || continue
    read -r pid st <"$f" || true
    if [[ -n ${pid:-} ]] && pid_alive "$name"; then sids+=("$pid"); fi
    rm -f "$f"
  done
  ((${#sids[@]})) || return 0
  all_pids() { local s; for s in "${sids[@]}"; do session_pids "$s"; done; }
  pids=$(all_pids)
  # shellcheck disable=SC2086
  [[ -n $pids ]] && kill -TERM $pids 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    pids=$(all_pids); [[ -z $pids ]] && break; sleep 0.1
  done
  # shellcheck disable=SC2086
  if [[ -n $pids ]]; then log "killing what did not stop in 10 s: $pids"; kill -KILL $pids 2>/dev/null || true; fi
  log "stopped: $*"
}

[[ -d "$CLUSTER_DIR/run" ]] || { log "no testbed state in $CLUSTER_DIR: nothing to stop"; exit 0; }
stop pod-runner            # first: it stops the hook processes it runs
others=()
for f in "$CLUSTER_DIR"/run/*.pid; do [[ -e $f ]] && others+=("$(basename "$f" .pid)"); done
((${#others[@]})) && stop "${others[@]}"
forget_ray_current_cluster
root_miles_release
rm -rf "$CLUSTER_DIR/etcd-data" "$CLUSTER_DIR/runner" "$RAY_TMP"

for ((i = 0; i < 50; i++)); do busy=$(listening_ports); [[ -z $busy ]] && break; sleep 0.1; done
[[ -z $busy ]] || die "testbed stopped but port(s) still in use: $busy"
log "testbed down; no testbed process or port left"
