#!/usr/bin/env bash
# Creates the testbed PKI and kubeconfig under $CLUSTER_DIR (idempotent: kept once created).
# ca.{crt,key}: cluster CA; apiserver.{crt,key}: serving cert for 127.0.0.1 and the real node's host address; admin.{crt,key}: client cert in
# system:masters (used by the control plane components, kwok, KubeRay, the pod runner and you);
# sa.{key,pub}: service-account token signing key pair (TokenRequest API).
set -euo pipefail
source "$(dirname "$0")/config.sh"
pki="$CLUSTER_DIR/pki"
mkdir -p "$pki"
cd "$pki"
command -v openssl >/dev/null || { echo "certs.sh: openssl not found on PATH" >&2; exit 2; }

ec_key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }

if [[ ! -s ca.crt || ! -s ca.key ]]; then
  ec_key ca.key
  openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=miles-testbed-ca" -out ca.crt 2>/dev/null
  rm -f apiserver.crt admin.crt
fi
# the real node (node.sh) reaches the API server at $node_host_ip: a cert made before that address was added is remade
if [[ -s apiserver.crt ]] && ! openssl x509 -in apiserver.crt -noout -ext subjectAltName 2>/dev/null | grep -q "IP Address:$node_host_ip\b"; then
  rm -f apiserver.crt
fi
if [[ ! -s apiserver.crt ]]; then
  ec_key apiserver.key
  cat >apiserver.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,IP:$node_host_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EXT
  openssl req -new -key apiserver.key -subj "/CN=kube-apiserver" -out apiserver.csr 2>/dev/null
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
    -extfile apiserver.ext -out apiserver.crt 2>/dev/null
fi
if [[ ! -s admin.crt ]]; then
  ec_key admin.key
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >client.ext
  openssl req -new -key admin.key -subj "/O=system:masters/CN=testbed-admin" -out admin.csr 2>/dev/null
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
    -extfile client.ext -out admin.crt 2>/dev/null
fi
if [[ ! -s sa.key ]]; then
  ec_key sa.key
  openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
fi

b64() { base64 -w0 <"$1"; }
cat >"$CLUSTER_DIR/kubeconfig.tmp" <<KC
apiVersion: v1
kind: Config
clusters:
- name: miles-testbed
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(b64 ca.crt)
users:
- name: testbed-admin
  user:
    client-certificate-data: $(b64 admin.crt)
    client-key-data: $(b64 admin.key)
contexts:
- name: miles-testbed
  context: {cluster: miles-testbed, user: testbed-admin, namespace: default}
current-context: miles-testbed
KC
chmod 600 "$CLUSTER_DIR/kubeconfig.tmp" ./*.key
mv "$CLUSTER_DIR/kubeconfig.tmp" "$CLUSTER_DIR/kubeconfig"
