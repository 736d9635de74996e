#!/usr/bin/env bash
# Stops every testbed process (each was started in its own session: the whole session is stopped, nothing
# else) and checks that no testbed port is left open. Keeps .tools/cluster/{pki,logs}; removes cluster state.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/config.sh"
source "$here/lib.sh"

[[ -d "$CLUSTER_DIR/run" ]] || { log "no testbed state in $CLUSTER_DIR: nothing to stop"; exit 0; }
[[ -d $CLUSTER_DIR/node ]] && "$here/node.sh" down   # the real node, when one joined
[[ -d $CLUSTER_DIR/kueue ]] && "$here/kueue.sh" down  # Kueue, when a test started it
stop_proc pod-runner            # first: it stops the hook processes it runs
others=()
for f in "$CLUSTER_DIR"/run/*.pid; do [[ -e $f ]] && others+=("$(basename "$f" .pid)"); done
((${#others[@]})) && stop_proc "${others[@]}"
mountpoints_release
rm -rf "$CLUSTER_DIR/etcd-data" "$CLUSTER_DIR/runner" "$RAY_TMP"

for ((i = 0; i < 50; i++)); do busy=$(listening_ports); [[ -z $busy ]] && break; sleep 0.1; done
[[ -z $busy ]] || die "testbed stopped but port(s) still in use: $busy"
log "testbed down; no testbed process or port left"
