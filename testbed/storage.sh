#!/usr/bin/env bash
# Creates the shared-storage stand-in for NAMESPACE: a hostPath PersistentVolume on $FSX_DIR (writable by the hook
# pods' UID) pre-bound to an RWX PersistentVolumeClaim named CLAIM (default fsx-claim, what the chart's
# `storage.existingClaim` expects),
# and the Secret testbed-ray-auth with the testbed's Ray token (what values-local-testbed.yaml names).
# Idempotent. Usage: testbed/storage.sh [NAMESPACE] [CLAIM]      (delete: storage.sh --delete NAMESPACE [CLAIM])
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/config.sh"
source "$here/lib.sh"
delete=0
if [[ ${1:-} == --delete ]]; then delete=1; shift; fi
ns=${1:-default}
claim=${2:-$FSX_CLAIM}
[[ $ns =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || die "namespace '$ns' is not a valid DNS-1123 label"
[[ $claim =~ ^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$ ]] || die "claim '$claim' is not a valid DNS-1123 name"
kc=(--kubeconfig "$KUBECONFIG_TESTBED")
pv="testbed-fsx-$ns-$claim"
pv=${pv:0:253}
if ((delete)); then
  "$bin/kubectl" "${kc[@]}" -n "$ns" delete pvc "$claim" --ignore-not-found --wait=false >/dev/null
  "$bin/kubectl" "${kc[@]}" delete pv "$pv" --ignore-not-found --wait=false >/dev/null
  exit 0
fi
mkdir -p "$FSX_DIR"
# FSx for Lustre applies no fsGroup, so docs/chart.md has the admin make the shared dirs writable by the hooks' UID
# once: here a default ACL on the whole stand-in, so what root (the tests' seeding, the Ray pods) writes there
# stays writable by the hook pods too
setfacl -R -m "u:$HOOKS_UID:rwX,d:u:$HOOKS_UID:rwX" "$FSX_DIR"
"$bin/kubectl" "${kc[@]}" get namespace "$ns" >/dev/null 2>&1 || "$bin/kubectl" "${kc[@]}" create namespace "$ns" >/dev/null
"$bin/kubectl" "${kc[@]}" apply --validate=false -f - >/dev/null <<YAML
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $pv
  labels: {testbed.miles.dev/storage: fsx}
spec:
  capacity: {storage: 1200Gi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: $FSX_DIR, type: DirectoryOrCreate}
  claimRef: {namespace: $ns, name: $claim}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: $claim
  namespace: $ns
  labels: {testbed.miles.dev/storage: fsx}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: $pv
  resources: {requests: {storage: 1200Gi}}
YAML
# The Ray token of the testbed's one Ray head (up.sh), as the Secret the testbed overlay names
# (secrets.rayAuth.existingSecret): the namespace's hook and Ray pods authenticate with it. Under both keys the
# chart reads: `token` (mode rayCluster) and `auth_token` (mode rayJob, the key KubeRay's authOptions reads).
[[ -s $RAY_AUTH_TOKEN_FILE ]] || die "no Ray token at $RAY_AUTH_TOKEN_FILE: start the testbed first (make cluster-up)"
"$bin/kubectl" "${kc[@]}" -n "$ns" create secret generic "$TESTBED_RAY_AUTH_SECRET" \
  --from-file=token="$RAY_AUTH_TOKEN_FILE" --from-file=auth_token="$RAY_AUTH_TOKEN_FILE" --dry-run=client -o yaml | "$bin/kubectl" "${kc[@]}" apply -f - >/dev/null
# A watch, bounded well past the binder's retry period (up.sh: --pvclaimbinder-sync-period=2s): a claim
# whose volume the binder had not seen yet is bound on the next retry, not on the claim's event.
"$bin/kubectl" "${kc[@]}" -n "$ns" wait pvc "$claim" --for=jsonpath='{.status.phase}'=Bound --timeout=30s \
  >/dev/null 2>&1 && exit 0
phase=$("$bin/kubectl" "${kc[@]}" -n "$ns" get pvc "$claim" -o jsonpath='{.status.phase}' 2>/dev/null || true)
die "PVC $ns/$claim did not bind to PV $pv within 30 s (phase '$phase')"
