#!/usr/bin/env bash
# make package: packages the chart, pushes it to an OCI registry on loopback (the in-memory registry
# built from its Go module by make tools), pulls it back and checks the pulled archive is byte-identical.
# With INSTALL=1 and the local testbed up (make cluster-up), also installs the pulled chart there
# (namespace $INSTALL_NAMESPACE, default miles-oci, which needs the storage claim and hf-token Secret that
# testbed/demo.sh sets up for its namespace).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT_DIR:-$root/.out/package}
rm -rf "$out"; mkdir -p "$out/pulled"
helm=${HELM:-helm}

"$helm" lint charts/miles -f values/values-colocated.yaml
"$helm" package charts/miles --destination "$out"
archive=$(ls "$out"/miles-*.tgz)
version=$(basename "$archive" .tgz); version=${version#miles-}

port_file="$out/registry.log"
oci-registry -port 0 >"$port_file" 2>&1 &
registry_pid=$!
trap 'kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 50); do
  port=$(sed -nE 's/.*serving on port ([0-9]+).*/\1/p' "$port_file" | head -n 1)
  [[ -n $port ]] && break
  sleep 0.1
done
[[ -n $port ]] || { echo "package: the OCI registry did not start:"; cat "$port_file"; exit 1; } >&2
ref="oci://127.0.0.1:$port/charts"

echo "== push $archive to $ref"
"$helm" push "$archive" "$ref" --plain-http
echo "== pull $ref/miles:$version"
"$helm" pull "$ref/miles" --version "$version" --plain-http --destination "$out/pulled"
if ! cmp -s "$archive" "$out/pulled/$(basename "$archive")"; then
  echo "package: the chart pulled from $ref differs from the one pushed" >&2
  exit 1
fi
echo "round trip ok: $(sha256sum "$archive" | cut -c1-16)… pushed and pulled back identical"

if [[ ${INSTALL:-0} == 1 ]]; then
  echo "== install the pulled chart into the local testbed"
  "$helm" upgrade --install miles-oci "$out/pulled/$(basename "$archive")" --wait --timeout 8m \
    -n "${INSTALL_NAMESPACE:-miles-oci}" -f values/values-local-testbed.yaml -f values/values-colocated.yaml
fi
