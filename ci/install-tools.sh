#!/usr/bin/env bash
# Builds every tool the project uses into .tools/ from pinned package-registry sources.
# Idempotent: each part is rebuilt only when the files that pin it change (a stamp holds their hash).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/.tools"
bin="$tools/bin"
stamps="$tools/stamps"
mkdir -p "$bin" "$stamps"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

log() { printf '[tools %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# A part's digest covers the files that pin it and the body of the function that builds it, so editing
# one part of this script rebuilds that part alone.
digest() {
  local builder=$1; shift
  { cat "$@"; declare -f "$builder"; } | sha256sum | cut -d' ' -f1
}
# fresh NAME FILE... -> true when NAME's stamp matches; call from the part's build function.
fresh() {
  local name=$1; shift
  [[ -f "$stamps/$name" && "$(cat "$stamps/$name")" == "$(digest "${FUNCNAME[1]}" "$@")" ]]
}
stamp() {
  local name=$1; shift
  digest "${FUNCNAME[1]}" "$@" >"$stamps/$name"
}

# go_build_versioned DIR OUT PACKAGE MODULE VAR: builds PACKAGE of the tools module in DIR to OUT,
# stamping MODULE's pinned version into the link-time variable VAR (tools print it with --version).
go_build_versioned() {
  local dir=$1 out=$2 pkg=$3 module=$4 var=$5 ldflags="-s -w ${6:-}"
  if [[ -n $module ]]; then
    ldflags+=" -X $var=$(cd "$dir" && go list -m -f '{{.Version}}' "$module")"
  fi
  (cd "$dir" && go build -trimpath -ldflags="$ldflags" -o "$out" "$pkg")
}

# Helm 4 alone is what the demo runs; `build_helm_test_tools` builds the rest (Helm 3 and the chart's test
# tools) from the same pinned module.
build_helm4() {
  local dir="$root/ci/tools/helm"
  if fresh go-helm4 "$dir/go.mod" "$dir/go.sum" && [[ -x "$tools/helmv4/helm" ]]; then log "helm 4 up to date"; return; fi
  log "building helm v4"
  go_build_versioned "$dir" "$tools/helmv4/helm" helm.sh/helm/v4/cmd/helm \
    helm.sh/helm/v4 helm.sh/helm/v4/internal/version.version
  stamp go-helm4 "$dir/go.mod" "$dir/go.sum"
}

build_helm_test_tools() {
  local dir="$root/ci/tools/helm"
  if fresh go-helm-test-tools "$dir/go.mod" "$dir/go.sum" && [[ -x "$tools/helmv3/helm" ]]; then
    log "helm 3, helm-unittest, kubeconform, ct, helm-docs up to date"; return
  fi
  # Helm 3 takes its default Kubernetes version (for `template`, `lint` and kubeVersion checks) from
  # link-time variables; unset, it assumes v1.20 and refuses the chart's kubeVersion. Use the client-go
  # minor it is built with, as Helm's own release build does.
  local k8s_minor; k8s_minor=$(cd "$dir" && go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)
  local v3_kube="-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$k8s_minor"
  v3_kube+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$k8s_minor"
  log "building helm v3"
  go_build_versioned "$dir" "$tools/helmv3/helm" helm.sh/helm/v3/cmd/helm \
    helm.sh/helm/v3 helm.sh/helm/v3/internal/version.version "$v3_kube"
  log "building helm-unittest, kubeconform, ct, helm-docs"
  go_build_versioned "$dir" "$tools/untt" github.com/helm-unittest/helm-unittest/cmd/helm-unittest "" "" "$v3_kube"
  go_build_versioned "$dir" "$bin/kubeconform" github.com/yannh/kubeconform/cmd/kubeconform \
    github.com/yannh/kubeconform main.version
  go_build_versioned "$dir" "$bin/ct" github.com/helm/chart-testing/v3/ct \
    github.com/helm/chart-testing/v3 github.com/helm/chart-testing/v3/ct/cmd.Version
  go_build_versioned "$dir" "$bin/helm-docs" github.com/norwoodj/helm-docs/cmd/helm-docs \
    github.com/norwoodj/helm-docs main.version
  stamp go-helm-test-tools "$dir/go.mod" "$dir/go.sum"
}

# Each Helm gets its own config/cache/data/plugins under .tools/helmN so the two never share state,
# and the helm-unittest plugin is installed into both.
install_helm_wrappers() {
  local m dir
  for m in v3 v4; do
    dir="$tools/helm$m"
    mkdir -p "$dir/plugins/helm-unittest" "$dir/config" "$dir/cache" "$dir/data"
    cp -f "$root/ci/tools/helm-unittest-plugin.yaml" "$dir/plugins/helm-unittest/plugin.yaml"
    ln -sf ../../../untt "$dir/plugins/helm-unittest/untt"
    cat >"$bin/helm${m#v}" <<WRAP
#!/usr/bin/env bash
export HELM_PLUGINS="$dir/plugins" HELM_CONFIG_HOME="$dir/config" HELM_CACHE_HOME="$dir/cache" HELM_DATA_HOME="$dir/data"
exec "$dir/helm" "\$@"
WRAP
    chmod +x "$bin/helm${m#v}"
  done
  ln -sf helm4 "$bin/helm"
}

build_helmfile() {
  local dir="$root/ci/tools/helmfile"
  if fresh go-helmfile "$dir/go.mod" "$dir/go.sum"; then log "helmfile up to date"; return; fi
  log "building helmfile (large; several minutes cold)"
  (cd "$dir" && go build -trimpath -ldflags="-s -w" -o "$bin/helmfile" github.com/helmfile/helmfile)
  stamp go-helmfile "$dir/go.mod" "$dir/go.sum"
}

build_registry() {
  local dir="$root/ci/tools/registry"
  if fresh go-registry "$dir/go.mod" "$dir/go.sum"; then log "registry up to date"; return; fi
  log "building the OCI registry (loopback, in-memory) for make package"
  go_build_versioned "$dir" "$bin/oci-registry" github.com/google/go-containerregistry/cmd/registry "" ""
  stamp go-registry "$dir/go.mod" "$dir/go.sum"
}

# uv installs every Python environment here from one shared cache (~/.cache/uv), hard-linking files into
# each venv: .venv and the contract venv share one torch+CUDA copy (~4 GiB) on disk, and a second clone
# of the repo builds its environments in a minute from the cache instead of downloading them again.
uv_tool() {
  local req="$root/ci/requirements-uv.txt"
  if fresh uv "$req" && [[ -x "$tools/uv/bin/uv" ]]; then return; fi
  log "installing uv (pinned by ci/requirements-uv.txt)"
  rm -rf "$tools/uv"
  python3 -m venv "$tools/uv"
  "$tools/uv/bin/pip" install -q -r "$req"
  stamp uv "$req"
}
# new_venv DIR: a fresh venv on this machine's python3 (never a downloaded interpreter)
new_venv() {
  uv_tool
  rm -rf "$1"
  UV_PYTHON_DOWNLOADS=never "$tools/uv/bin/uv" venv -q --python "$(command -v python3)" "$1"
}
# venv_install DIR ARGS...: uv pip install ARGS into the venv at DIR, compiled to bytecode. uv does not
# compile by default, and where PYTHONDONTWRITEBYTECODE=1 is set (this machine, many CI and container
# environments) Python never keeps what it compiles: every test subprocess that imports torch, ray or
# Megatron compiled them again (one contract parser run: 31 s of CPU without, 15 s with).
venv_install() {
  local dir=$1; shift
  UV_PYTHON_DOWNLOADS=never "$tools/uv/bin/uv" pip install -q --compile-bytecode --python "$dir/bin/python" "$@"
}

python_env() {
  local req="$root/ci/requirements.txt" lock="$root/ci/requirements.lock"
  local pyproject="$root/hooks/pyproject.toml" reward="$root/images/reward-service/pyproject.toml"
  local testbed="$root/testbed/pyproject.toml"
  if fresh venv "$req" "$lock" "$pyproject" "$reward" "$testbed" && [[ -x "$root/.venv/bin/python" ]]; then
    log "python venv up to date"; return
  fi
  log "installing .venv from ci/requirements.txt (pinned by ci/requirements.lock)"
  new_venv "$root/.venv"
  venv_install "$root/.venv" -r "$req" -c "$lock"
  venv_install "$root/.venv" --no-deps -e "$root/hooks" -e "$root/images/reward-service" -e "$root/testbed"
  stamp venv "$req" "$lock" "$pyproject" "$reward" "$testbed"
}

# kubeconform's strict schemas for the pinned Kubernetes version and the KubeRay CRDs, generated from the
# upstream Go modules (never hand-written); tests and make scenarios validate every rendered scenario with them.
kubeconform_schemas() {
  local gen="$root/ci/kubeconform/gen-schemas.py" versions="$root/ci/kubeconform/versions.env"
  local out="$tools/kubeconform-schemas"
  if fresh kubeconform-schemas "$gen" "$versions" && [[ -d $out ]]; then log "kubeconform schemas up to date"; return; fi
  log "generating kubeconform schemas (Kubernetes + KubeRay CRDs) into $out"
  rm -rf "$out"
  "$root/.venv/bin/python" "$gen" --out "$out"
  stamp kubeconform-schemas "$gen" "$versions"
}

# checkov pins its own dependency set, which conflicts with ray's: it gets a venv of its own.
checkov_env() {
  local req="$root/ci/requirements-checkov.txt" lock="$root/ci/requirements-checkov.lock"
  if fresh checkov "$req" "$lock" && [[ -x "$tools/checkov/bin/checkov" ]]; then log "checkov up to date"; return; fi
  log "creating checkov venv"
  new_venv "$tools/checkov"
  venv_install "$tools/checkov" -r "$req" -c "$lock"
  ln -sf ../checkov/bin/checkov "$bin/checkov"
  stamp checkov "$req" "$lock"
}

# Debian packages the image builds and the container runtime come from (images are built without a Docker
# daemon; see testbed/images/build.sh). Installed only when one is missing. pigz: containerd inflates gzip layers with
# unpigz when it finds it, in half gzip's time (16 s instead of 30 for the miles stand-in's 4.9 GB torch layer).
debian_packages() {
  local wanted=(mmdebstrap buildah containerd runc containernetworking-plugins socat conntrack dnsutils acl pigz)
  local missing=() pkg
  for pkg in "${wanted[@]}"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  ((${#missing[@]} == 0)) && return
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "${missing[@]}" >/dev/null || { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }
}

# The product's images (hooks, reward service) built from their own Dockerfiles for the testbed; buildah's
# layer cache makes an unchanged build take seconds.
build_images() {
  debian_packages
  uv_tool
  "$root/testbed/images/build.sh"
}

# --- local testbed (docs/testbed.md): real control plane, kwok, KubeRay, each from its own pinned tools module ------
# cluster_module MODULE LDFLAGS BIN=PACKAGE... builds the PACKAGEs of ci/tools/MODULE in ONE `go build` (shared
# compile work) to .tools/bin/BIN; rebuilt only when that module's go.mod/go.sum change or a binary is missing.
cluster_module() {
  local mod=$1 ldflags="-s -w $2"; shift 2
  local dir="$root/ci/tools/$mod" pair missing=0 pkgs=()
  for pair in "$@"; do [[ -x "$bin/${pair%%=*}" ]] || missing=1; pkgs+=("${pair#*=}"); done
  if ((missing == 0)) && fresh "cluster-$mod" "$dir/go.mod" "$dir/go.sum" <(echo "$ldflags"); then
    log "cluster tools '$mod' up to date"; return
  fi
  log "building $mod: ${pkgs[*]} (cold: minutes on 2 cores)"
  local t0=$SECONDS
  if (($# == 1)); then
    (cd "$dir" && go build -trimpath -ldflags="$ldflags" -o "$bin/${1%%=*}" "${pkgs[0]}")
  else
    local out="$tools/build-$mod"
    mkdir -p "$out"
    (cd "$dir" && go build -trimpath -ldflags="$ldflags" -o "$out/" "${pkgs[@]}")
    for pair in "$@"; do mv -f "$out/$(basename "${pair#*=}")" "$bin/${pair%%=*}"; done
    rmdir "$out"
  fi
  log "built $mod in $((SECONDS - t0))s"
  stamp "cluster-$mod" "$dir/go.mod" "$dir/go.sum" <(echo "$ldflags")
}

# module_dir MODULE_DIR_NAME GO_MODULE -> where the go command keeps GO_MODULE's source for ci/tools/MODULE_DIR_NAME
module_dir() { (cd "$root/ci/tools/$1" && go list -m -f '{{.Dir}}' "$2"); }

# Kubernetes reports its version from link-time variables (else "v0.0.0-master", which Helm and clients reject).
kube_version_ldflags() {
  local v; v=$(cd "$root/ci/tools/kubernetes" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
  local minor=${v#v1.}; minor=${minor%%.*}
  local p=k8s.io/component-base/version
  echo "-X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean" \
    "-X $p.buildDate=1970-01-01T00:00:00Z -X k8s.io/client-go/pkg/version.gitVersion=$v" \
    "-X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
}

# What a testbed runs: the control plane, kwok, KubeRay and CoreDNS, with KubeRay's and kwok's CRDs.
build_cluster() {
  cluster_module kubernetes "$(kube_version_ldflags)" kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
    kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
    kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler kubectl=k8s.io/kubernetes/cmd/kubectl \
    kubelet=k8s.io/kubernetes/cmd/kubelet kube-proxy=k8s.io/kubernetes/cmd/kube-proxy
  cluster_module etcd "" etcd=go.etcd.io/etcd/server/v3
  cluster_module kwok "" kwok=sigs.k8s.io/kwok/cmd/kwok coredns=github.com/miles-k8s/ci/tools/kwok/coredns
  cluster_module kuberay "" kuberay-operator=github.com/ray-project/kuberay/ray-operator
  # CRDs from the same pinned modules: KubeRay's, and kwok's Logs (so `kubectl logs` reaches runner pods).
  local src
  mkdir -p "$tools/kuberay/crds" "$tools/kwok/crds"
  src=$(module_dir kuberay github.com/ray-project/kuberay/ray-operator)
  install -m 0644 "$src"/config/crd/bases/ray.io_*.yaml "$tools/kuberay/crds/"
  src=$(module_dir kwok sigs.k8s.io/kwok)
  install -m 0644 "$src/kustomize/crd/bases/kwok.x-k8s.io_logs.yaml" "$tools/kwok/crds/"
}

# What only the tests add to a testbed: Kueue, and the CRDs of every KubeRay the chart supports
# (ci/kubeconform/versions.env) for the e2e tests that put an older operator's CRD in place.
build_cluster_test_parts() {
  cluster_module kueue "" kueue=sigs.k8s.io/kueue/cmd/kueue
  local src version
  for version in $(sed -n 's/^KUBERAY_VERSIONS=//p' "$root/ci/kubeconform/versions.env"); do
    src=$(go mod download -json "github.com/ray-project/kuberay/ray-operator@v$version" \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    mkdir -p "$tools/kuberay/crds-$version"
    install -m 0644 "$src"/config/crd/bases/ray.io_*.yaml "$tools/kuberay/crds-$version/"
  done
  # Kueue's CRDs and webhook configurations, as its release manifests ship them (testbed/kueue.sh points
  # the webhooks at the local controller).
  src=$(module_dir kueue sigs.k8s.io/kueue)
  rm -rf "$tools/kueue" && mkdir -p "$tools/kueue/crds"
  install -m 0644 "$src"/config/components/crd/bases/*.yaml "$tools/kueue/crds/"
  install -m 0644 "$src/config/components/webhook/manifests.yaml" "$tools/kueue/webhooks.yaml"
}

# The real miles argument parser (PyPI miles-rl, which vendors miles/, megatron/ and sglang/) with the
# exact closure its parse path imports: the contract tests feed every rendered train argv through it.
# --no-deps: miles-rl declares packages (wandb, torchft, ring_flash_attn, ...) that path never imports.
contract_env() {
  local req="$root/ci/miles-contract/requirements.txt" venv="$tools/miles-contract"
  if fresh miles-contract "$req" && [[ -x "$venv/bin/python" ]]; then log "miles contract venv up to date"; return; fi
  log "creating the miles contract venv (miles-rl and its parse-path closure) in $venv"
  new_venv "$venv"
  venv_install "$venv" --no-deps -r "$req"
  "$venv/bin/python" -c "import miles.utils.arguments" >/dev/null
  stamp miles-contract "$req"
}

# The Python the testbed's simulated Ray workers run (miles_testbed.ray_workers): the CPython 3.12 the images' base
# carries and Ray from the miles stand-in's hashed lock, as in the image the Ray heads run (Ray refuses a node
# of another Python or Ray version). Ray alone: the stand-in's torch is for its convert pod.
ray_worker_env() {
  local lock="$root/testbed/images/miles-standin/requirements.lock" venv="$tools/ray-worker-venv" python ray
  if fresh ray-worker "$lock" && [[ -x "$venv/bin/ray" ]]; then log "Ray worker venv up to date"; return; fi
  python=$("$root/testbed/images/build.sh" --python312)
  ray=$(grep -m1 '^ray\[' "$root/testbed/images/miles-standin/requirements.txt")
  log "creating the Ray worker venv ($python, $ray from testbed/images/miles-standin/requirements.lock) in $venv"
  uv_tool
  rm -rf "$venv"
  UV_PYTHON_DOWNLOADS=never "$tools/uv/bin/uv" venv -q --python "$python" "$venv"
  venv_install "$venv" "$ray" -c "$lock"
  "$venv/bin/ray" --version >/dev/null
  stamp ray-worker "$lock"
}

# Parts by name: the functions that build each, the files under .tools/ that mark it built (its stamps; the
# images' manifest), and what it is, for the plan `make demo` prints first.
declare -A PART_BUILD=(
  [helm4]="build_helm4 install_helm_wrappers" [helm]="build_helm4 build_helm_test_tools install_helm_wrappers"
  [helmfile]=build_helmfile [registry]=build_registry [uv]=uv_tool [python]=python_env [schemas]=kubeconform_schemas
  [checkov]=checkov_env [contract]=contract_env [cluster]=build_cluster [cluster-test]=build_cluster_test_parts
  [images]=build_images [rayworker]=ray_worker_env
)
declare -A PART_MARKS=(
  [helm4]=stamps/go-helm4 [helm]="stamps/go-helm4 stamps/go-helm-test-tools" [helmfile]=stamps/go-helmfile
  [registry]=stamps/go-registry [uv]=stamps/uv [python]=stamps/venv [schemas]=stamps/kubeconform-schemas
  [checkov]=stamps/checkov [contract]=stamps/miles-contract [cluster-test]=stamps/cluster-kueue
  [cluster]="stamps/cluster-kubernetes stamps/cluster-etcd stamps/cluster-kwok stamps/cluster-kuberay"
  [images]=images/manifest.json [rayworker]=stamps/ray-worker
)
declare -A PART_WHAT=(
  [helm4]="Helm 4" [helm]="Helm 3 and 4, helm-unittest, kubeconform, ct, helm-docs" [helmfile]=helmfile
  [registry]="an OCI registry" [uv]=uv [python]="the Python env (.venv)" [schemas]="kubeconform schemas"
  [checkov]=checkov [contract]="the miles contract venv" [cluster]="Kubernetes, etcd, kwok, KubeRay, CoreDNS"
  [cluster-test]="Kueue and the older KubeRay CRDs" [images]="Debian packages and the testbed images"
  [rayworker]="the Ray worker venv"
)
# The demo's lanes and everything's. The Go builds keep both cores compiling while the Python environments and
# the images mostly wait on downloads and decompression. The demo's job parses its argv with the real miles
# parser, so the contract venv is part of it.
DEMO_GO="helm4 cluster" DEMO_PY="python contract images rayworker"
ALL_GO="helm helmfile registry cluster cluster-test" ALL_PY="python schemas checkov contract images rayworker"

# build_part NAME: builds one part and says how long it took
build_part() {
  local name=$1 fn t0=$SECONDS
  [[ -n ${PART_BUILD[$name]:-} ]] || {
    echo "install-tools.sh: unknown part '$name' (expected demo, all or one of: ${!PART_BUILD[*]})" >&2; return 2
  }
  for fn in ${PART_BUILD[$name]}; do "$fn"; done
  log "$name ready in $((SECONDS - t0)) s"
}
build_parts() { local name; for name in "$@"; do build_part "$name"; done; }

# lane NAME CMD...: runs CMD with each output line prefixed by NAME, in the background (the lane's pid in $!).
lane() {
  local name=$1; shift
  { "$@" 2>&1 | sed -u "s/^/[$name] /"; } &
}
# two_lanes "GO PARTS" "PY PARTS": a lane that fails fails the whole, after the other has finished.
two_lanes() {
  local go_lane py_lane rc=0
  lane go build_parts $1; go_lane=$!
  lane py build_parts $2; py_lane=$!
  wait "$go_lane" || rc=$?
  wait "$py_lane" || rc=$?
  return "$rc"
}

# plan PARTS...: one line per part, built (checked against its pins in seconds) or to build
plan() {
  local name mark state
  for name in "$@"; do
    state=built
    for mark in ${PART_MARKS[$name]}; do [[ -f "$tools/$mark" ]] || state="to build"; done
    printf '  %-13s %-9s %s\n' "$name" "$state" "${PART_WHAT[$name]}"
  done
}

main() {
  local part
  if [[ ${1:-} == --plan ]]; then
    case ${2:-all} in demo) plan $DEMO_GO $DEMO_PY ;; all) plan $ALL_GO $ALL_PY ;; *) plan "${@:2}" ;; esac
    return
  fi
  for part in "${@:-all}"; do
    case $part in
      demo) two_lanes "$DEMO_GO" "$DEMO_PY" ;;
      all) two_lanes "$ALL_GO" "$ALL_PY" ;;
      *) build_part "$part" ;;
    esac
  done
  log "done"
}
main "$@"; exit  # one line: bash must not read on if this file changes while it runs
