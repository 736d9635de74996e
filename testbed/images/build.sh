#!/usr/bin/env bash
# Builds the product's images for the testbed without a Docker daemon, with buildah (Debian):
#   python-base    stand-in for python:3.12-slim: mmdebstrap'd Debian bookworm + this machine's CPython 3.12
#   miles-hooks    images/hooks.Dockerfile, unchanged, on that base (--build-arg PYTHON_IMAGE)
#   miles-reward   images/reward-service/Dockerfile, unchanged, on that base
#   miles-standin  the testbed's CPU stand-in for the miles image (testbed/images/miles-standin): Ray from its hashed
#                  lock and testbed/fake-miles at /root/miles, on that base; the Ray head on the real node
#   pause          the pod sandbox image of the real node's containerd, compiled from the pinned Kubernetes
#                  module's build/pause and tagged as the kubelet's default (registry.k8s.io/pause:TAG)
# buildah's storage and the exported OCI archives live in one cache shared by every clone on the machine
# (MILES_IMAGE_CACHE, default ~/.cache/miles-k8s/images), and buildah reuses a layer whose inputs are
# unchanged: a second build takes seconds. It writes .tools/images/manifest.json: for each image its
# reference, image id and OCI archive (what the tests and the testbed's containerd import).
#
#   testbed/images/build.sh            build what changed, export what is new, write the manifest
#   testbed/images/build.sh --buildah  print the buildah command line (storage options included) and exit
#   testbed/images/build.sh --python312  print the CPython 3.12 the base carries (the testbed's Ray workers run it too)
set -euo pipefail
shopt -s inherit_errexit

root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${MILES_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/miles-k8s/images}
here="$root/testbed/images"
manifest_dir="$root/.tools/images"
buildah=(buildah --root "$cache/storage" --runroot "$cache/run" --storage-driver overlay)

log() { printf '[images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }


# Debian packages the python:3.12-slim image carries that CPython's extension modules link against
base_packages=ca-certificates,netbase,tzdata,libssl3,libsqlite3-0,libffi8,libbz2-1.0,liblzma5,zlib1g,libreadline8,libncursesw6,libexpat1,libuuid1,libnsl2,libtirpc3

# The build steps fetch pinned, hash-checked packages from the package registry; a machine whose traffic
# passes a TLS-inspecting proxy trusts it through its own CA bundle. RUN steps get that bundle bind-mounted
# over the image's own and a pip.conf naming it; neither content is committed to any layer (buildah leaves
# an empty /etc/pip.conf mount point; tests/images/test_built_images.py checks both).
registry_trust=()
ca_bundle=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
if [[ -f $ca_bundle ]]; then
  mkdir -p "$cache"
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$cache/pip.conf"
  registry_trust=(-v "$ca_bundle:/etc/ssl/certs/ca-certificates.crt:ro" -v "$cache/pip.conf:/etc/pip.conf:ro")
fi

image_id() { "${buildah[@]}" inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null; }

# find_python312 -> a working CPython 3.12 interpreter: python3.12 on PATH, else one that pyenv installed
find_python312() {
  local candidate
  for candidate in "$(command -v python3.12 || true)" "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.12*/bin/python3.12; do
    if [[ -x $candidate ]] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      echo "$candidate"; return
    fi
  done
  echo "testbed/images/build.sh: needs CPython 3.12 (the Python of the product's images): none runs as python3.12 on PATH or under pyenv's versions/3.12*" >&2
  exit 2
}

if [[ ${1:-} == --buildah ]]; then printf '%q ' "${buildah[@]}"; echo; exit 0; fi
if [[ ${1:-} == --python312 ]]; then find_python312; exit 0; fi

# python_base -> prints the base image's reference, building it when its recipe changed. The reference
# carries the recipe's digest (package list, CPython build, Containerfile, this function), so an unchanged
# recipe is never rebuilt (mmdebstrap would fetch the day's packages again).
python_base() {
  local python prefix version
  python=$(find_python312)
  prefix=$("$python" -c 'import sys; print(sys.base_prefix)')
  version=$("$python" -c 'import sys; print(sys.version)')
  local digest ref
  digest=$({ echo "$base_packages" "$prefix" "$version"; cat "$here/python-base.Containerfile"; declare -f python_base; } |
    sha256sum | cut -c1-12)
  ref="localhost/miles-testbed/python:3.12-$digest"
  if [[ -n $(image_id "$ref") ]]; then echo "$ref"; return; fi
  log "building $ref: Debian bookworm (mmdebstrap) + CPython $("$python" -c 'import platform; print(platform.python_version())') from $prefix" 
  local ctx; ctx=$(mktemp -d "$cache/base-XXXXXX")
  mmdebstrap --quiet --variant=minbase --include="$base_packages" bookworm "$ctx/rootfs.tar" >&2
  mkdir -p "$ctx/python"
  # the interpreter and standard library only: no test suite, no Tk, no packages installed in the source
  # environment, no scripts whose shebang names the source prefix (ensurepip writes pip's own)
  (cd "$prefix" && tar --exclude='lib/python3.12/test' --exclude='lib/python3.12/idlelib' \
    --exclude='lib/python3.12/tkinter' --exclude='lib/python3.12/turtledemo' \
    --exclude='lib/python3.12/site-packages/*' --exclude='__pycache__' --exclude='bin/pip*' \
    --exclude='bin/idle*' --exclude='bin/2to3*' --exclude='bin/pydoc*' -cf - bin include lib share) |
    tar -C "$ctx/python" -xf -
  "${buildah[@]}" bud --quiet --isolation chroot -f "$here/python-base.Containerfile" -t "$ref" "$ctx" >/dev/null 2>"$ctx/build.log" \
    || { cat "$ctx/build.log" >&2; exit 1; }
  rm -rf "$ctx"
  echo "$ref"
}

# build NAME DOCKERFILE CONTEXT BASE [RUN-OPTION...] -> builds localhost/NAME:testbed with buildah's layer cache
# and prints the image id (this build's own: another clone may retag the shared name meanwhile)
build() {
  local name=$1 dockerfile=$2 context=$3 base=$4 t0=$SECONDS iid previous
  shift 4
  log "building localhost/$name:testbed from ${dockerfile#"$root"/}"
  previous=$(image_id "localhost/$name:testbed" || true)
  iid=$(mktemp "$cache/iid-XXXXXX")
  "${buildah[@]}" bud --quiet --layers --isolation chroot "${registry_trust[@]}" "$@" --iidfile "$iid" \
    --build-arg "PYTHON_IMAGE=$base" -f "$dockerfile" -t "localhost/$name:testbed" "$context" >/dev/null
  log "built localhost/$name:testbed in $((SECONDS - t0)) s"
  # the image the tag left (its archive stays for a day): without this every change of an input leaves its whole
  # image in the storage, gigabytes for the miles stand-in; buildah keeps it while it is another's parent
  if [[ -n $previous && $previous != "$(sed 's/^sha256://' "$iid")" ]]; then
    "${buildah[@]}" rmi "$previous" >/dev/null 2>&1 || true
  fi
  sed 's/^sha256://' "$iid"; rm -f "$iid"
}

# export NAME ID [REF] -> the image's OCI archive, written once per image id. Archives of other ids unused for a
# day go (another clone on the machine may still be using a recent one).
export_archive() {
  local name=$1 id=$2 ref=${3:-localhost/$1:testbed} archive
  archive="$cache/archives/$name-${id:0:12}.tar"
  mkdir -p "$cache/archives"
  find "$cache/archives" -name "$name-*.tar" ! -path "$archive" -mmin +1440 -delete
  if [[ -f $archive ]]; then
    touch "$archive"
  else
    "${buildah[@]}" push --quiet "$id" "oci-archive:$archive.part:$ref"
    mv "$archive.part" "$archive"
    log "exported $ref to $archive ($(du -h "$archive" | cut -f1))"
  fi
  printf '{"image": "%s", "id": "%s", "archive": "%s"}' "$ref" "$id" "$archive"
}

pause_source() {
  echo "$(cd "$root/ci/tools/kubernetes" && GOFLAGS=-mod=mod GOTOOLCHAIN=local go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause"
}
pause_ref() { echo "registry.k8s.io/pause:$(sed -n 's/^TAG ?= //p' "$(pause_source)/Makefile")"; }

# pause_image -> builds registry.k8s.io/pause:TAG as upstream's build/pause does (static pause.c, FROM scratch,
# USER 65535) from the pinned k8s.io/kubernetes module, and prints its id
pause_image() {
  local src ref ctx iid
  src=$(pause_source); ref=$(pause_ref)
  ctx=$(mktemp -d "$cache/pause-XXXXXX"); iid="$ctx/iid"
  gcc -Os -Wall -Werror -static "-DVERSION=v${ref##*:}-miles-testbed" -o "$ctx/pause" "$src/linux/pause.c"
  printf 'FROM scratch\nADD pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Containerfile"
  "${buildah[@]}" bud --quiet --layers --isolation chroot --iidfile "$iid" -t "$ref" "$ctx" >/dev/null
  sed 's/^sha256://' "$iid"; rm -rf "$ctx"
}

main() {
  local base hooks reward standin pause uv_mounts
  mkdir -p "$cache"
  # the stand-in installs with this machine's uv and its cache (see its Containerfile); make tools installs uv first
  local uv="$root/.tools/uv/bin/uv"
  [[ -x $uv ]] || { echo "testbed/images/build.sh: needs $uv (make tools installs it)" >&2; exit 2; }
  uv_mounts=(-v "$(dirname "$uv"):/tmp/uv-bin:ro" -v "$("$uv" cache dir):/tmp/uv-cache")
  base=$(python_base)
  hooks=$(build miles-hooks "$root/images/hooks.Dockerfile" "$root" "$base")
  reward=$(build miles-reward "$root/images/reward-service/Dockerfile" "$root/images/reward-service" "$base")
  standin=$(build miles-standin "$here/miles-standin/Containerfile" "$root" "$base" "${uv_mounts[@]}")
  pause=$(pause_image)
  mkdir -p "$manifest_dir"
  {
    printf '{"python-base": {"image": "%s", "id": "%s"}' "$base" "$(image_id "$base")"
    printf ',\n "miles-hooks": %s' "$(export_archive miles-hooks "$hooks")"
    printf ',\n "miles-reward": %s' "$(export_archive miles-reward "$reward")"
    printf ',\n "miles-standin": %s' "$(export_archive miles-standin "$standin")"
    printf ',\n "pause": %s}\n' "$(export_archive pause "$pause" "$(pause_ref)")"
  } >"$manifest_dir/manifest.json.part"
  mv "$manifest_dir/manifest.json.part" "$manifest_dir/manifest.json"
  log "images ready: $manifest_dir/manifest.json"
}
main "$@"; exit
