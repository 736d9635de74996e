#!/usr/bin/env bash
# Stops every testbed process (each was started in its own session: the whole session is stopped, nothing
# else) and checks that no testbed port is left open. Keeps .tools/cluster/{pki,logs}; removes cluster state.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/config.sh"
source "$here/lib.sh"

# session_pids SID -> pids of the processes in session SID
session_pids() { ps -e -o pid=,sid= | awk -v s="$1" '$2 == s {print $1}'; }

stop() {
  local name=$1 f="$CLUSTER_DIR/run/$1.pid" pid st i pids
  [[ -f $f ]] || return 0
  read -r pid st <"$f" || true
  if [[ -n ${pid:-} ]] && pid_alive "$name"; then
    pids=$(session_pids "$pid")
    # shellcheck disable=SC2086
    [[ -n $pids ]] && kill -TERM $pids 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      pids=$(session_pids "$pid"); [[ -z $pids ]] && break; sleep 0.1
    done
    # shellcheck disable=SC2086
    if [[ -n $pids ]]; then log "$name did not stop in 10 s: killing"; kill -KILL $pids 2>/dev/null || true; fi
    log "stopped $name"
  fi
  rm -f "$f"
}

[[ -d "$CLUSTER_DIR/run" ]] || { log "no testbed state in $CLUSTER_DIR: nothing to stop"; exit 0; }
for name in pod-runner kuberay-operator kwok kube-scheduler kube-controller-manager kube-apiserver etcd ray; do
  stop "$name"
done
for f in "$CLUSTER_DIR"/run/*.pid; do [[ -e $f ]] && stop "$(basename "$f" .pid)"; done
forget_ray_current_cluster
if [[ -f "$CLUSTER_DIR/run/created-root-miles" ]]; then
  rmdir /root/miles 2>/dev/null || log "left /root/miles in place (not empty)"
  rm -f "$CLUSTER_DIR/run/created-root-miles"
fi
rm -rf "$CLUSTER_DIR/etcd-data" "$CLUSTER_DIR/runner" "$RAY_TMP"

for ((i = 0; i < 50; i++)); do busy=$(listening_ports); [[ -z $busy ]] && break; sleep 0.1; done
[[ -z $busy ]] || die "testbed stopped but port(s) still in use: $busy"
log "testbed down; no testbed process or port left"
