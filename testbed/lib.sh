# Helpers for the testbed scripts (sourced after config.sh).
log() { printf '[testbed %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf 'testbed: error: %s\n' "$*" >&2; exit 1; }

need_bins() {
  local b missing=()
  for b in "$@"; do [[ -x "$bin/$b" ]] || missing+=("$b"); done
  ((${#missing[@]} == 0)) || die "missing tools in .tools/bin: ${missing[*]} — run \`make tools\`"
}

validate_config() {
  local v
  for v in NODES CPU_NODES GPU_PER_NODE EFA_PER_NODE MAX_RAY_WORKERS RAY_WORKER_CPUS RAY_WORKER_PORT_BASE; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, got '${!v}'"
  done
  ((CPU_NODES >= 1)) || die "CPU_NODES must be >= 1 (the Ray head and the hook Jobs run on the CPU pool)"
  for v in $(all_port_vars); do
    [[ ${!v} =~ ^[0-9]+$ ]] && ((${!v} > 0 && ${!v} < 65536)) || die "$v must be a TCP port number, got '${!v}'"
  done
}

all_port_vars() {
  echo ETCD_PORT ETCD_PEER_PORT APISERVER_PORT KCM_PORT SCHEDULER_PORT KWOK_PORT KUBERAY_METRICS_PORT \
    KUBERAY_HEALTH_PORT KUEUE_WEBHOOK_PORT KUEUE_HEALTH_PORT
}

# listening_ports -> the TCP ports (of the testbed's set) something listens on
listening_ports() {
  local v busy=()
  local open; open=$(ss -Hltn 2>/dev/null | awk '{print $4}' | sed 's/.*://' | sort -u)
  for v in $(all_port_vars); do
    grep -qx "${!v}" <<<"$open" && busy+=("$v=${!v}")
  done
  echo "${busy[*]:-}"
}

check_ports_free() {
  local busy; busy=$(listening_ports)
  [[ -z $busy ]] || die "port(s) already in use: $busy — another testbed or program holds them; set the named variable(s) to free ports (see testbed/config.sh)"
}

proc_start_time() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null; }

# start_proc NAME CMD... runs CMD in its own session (so the whole tree can be stopped), logs to logs/NAME.log
start_proc() {
  local name=$1; shift
  setsid "$@" >"$CLUSTER_DIR/logs/$name.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid $(proc_start_time "$pid")" >"$CLUSTER_DIR/run/$name.pid"
}

# session_pids SID -> pids of the processes in session SID
session_pids() { ps -e -o pid=,sid= | awk -v s="$1" '$2 == s {print $1}'; }

# stop_proc NAME... : SIGTERM every process in the sessions of the recorded components at once, wait up to 10 s for
# all of them, then SIGKILL what is left. Only the sessions we started (pid + start time recorded) are touched.
stop_proc() {
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

# pid_alive NAME -> true when the recorded process still runs (and is the one we started)
pid_alive() {
  local f="$CLUSTER_DIR/run/$1.pid" pid st
  [[ -f $f ]] || return 1
  read -r pid st <"$f"
  [[ -n $pid && -d /proc/$pid && "$(proc_start_time "$pid")" == "$st" ]]
}

any_running() {
  local f
  for f in "$CLUSTER_DIR"/run/*.pid; do
    [[ -e $f ]] || continue
    pid_alive "$(basename "$f" .pid)" && return 0
  done
  return 1
}

# wait_for DESC TIMEOUT CMD... polls CMD until it succeeds; fails early when a started component died.
wait_for() {
  local desc=$1 timeout=$2; shift 2
  local deadline=$(($(date +%s) + timeout)) f name
  until "$@" >/dev/null 2>&1; do
    for f in "$CLUSTER_DIR"/run/*.pid; do
      name=$(basename "$f" .pid)
      if ! pid_alive "$name"; then
        tail -n 30 "$CLUSTER_DIR/logs/$name.log" >&2 || true
        die "$name exited while waiting for $desc (log: $CLUSTER_DIR/logs/$name.log); run \`make cluster-down\`"
      fi
    done
    if (($(date +%s) >= deadline)); then
      die "timed out after ${timeout}s waiting for $desc (logs: $CLUSTER_DIR/logs/); run \`make cluster-down\`"
    fi
    sleep 0.2
  done
  if [[ -n ${UP_T0:-} ]]; then
    log "ready: $desc (+$(python3 -c "import time; print(f'{time.time()-$UP_T0:.1f}')")s)"
  else
    log "ready: $desc"
  fi
}

nodes_ready() {
  local n
  n=$("$bin/kubectl" --kubeconfig "$KUBECONFIG_TESTBED" get nodes --no-headers \
    -o 'custom-columns=R:.status.conditions[?(@.type=="Ready")].status' 2>/dev/null | grep -c '^True$')
  [[ $n -ge $1 ]]
}

# The Ray worker processes' mount points (miles_testbed.ray_workers.pod_like): /root/miles for testbed/fake-miles and the
# shared storage's mount path for $FSX_DIR, bound inside their own mount namespaces. Each is created when
# missing and removed when the last testbed using them goes (several testbeds may share them).
MOUNTPOINT_USERS=/tmp/miles-testbed-mountpoints.d
mountpoints_acquire() {
  local dir
  mkdir -p "$MOUNTPOINT_USERS/users" "$MOUNTPOINT_USERS/created"
  for dir in "$@"; do
    if [[ ! -e $dir ]]; then
      mkdir -p "$dir" && printf '%s\n' "$dir" >"$MOUNTPOINT_USERS/created/$(printf %s "$dir" | sha256sum | cut -c1-12)"
    fi
  done
  touch "$MOUNTPOINT_USERS/users/$(printf %s "$CLUSTER_DIR" | sha256sum | cut -c1-12)"
}
mountpoints_release() {
  [[ -d $MOUNTPOINT_USERS ]] || return 0
  rm -f "$MOUNTPOINT_USERS/users/$(printf %s "$CLUSTER_DIR" | sha256sum | cut -c1-12)"
  [[ -z "$(ls -A "$MOUNTPOINT_USERS/users" 2>/dev/null)" ]] || return 0
  local created
  for created in "$MOUNTPOINT_USERS"/created/*; do
    [[ -f $created ]] && { rmdir "$(cat "$created")" 2>/dev/null || true; }
  done
  rm -rf "$MOUNTPOINT_USERS"
}
