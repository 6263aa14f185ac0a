#!/usr/bin/env bash
# npm run demo:node: one real Kubernetes node on this machine (kubelet + containerd, tools/node-lab) with Coil
# installed from its image and manifests, the real Multus in front, and a pod with a Coil eth0 and a net1 from
# macvlan + veth. The same steps as the node tier (e2e/node/coil.test.ts); the lab stays up afterwards:
#   KUBECONFIG=<printed> kubectl get pods -A -o wide     (kubectl: the one the lab built, printed below)
#   npm run cluster -- down                               (stops the node and the API server, restores the host)
# Needs root and what `bash tools/ci/setup.sh` installs; the first run builds kubelet, containerd and Multus.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
say() { echo "demo: $*" >&2; }

[[ -x dist/bin/cnikit ]] || npm run build
say "images (npm run images -- coil veth-router)"
node tools/images/images.mjs coil veth-router >/dev/null
bins=$(bash tools/node-lab/build.sh 2>/dev/null)
KUBECTL=$(sed -n 's/^KUBECTL=//p' <<<"$bins"); CTR=$(sed -n 's/^CONTAINERD_BIN_DIR=//p' <<<"$bins")/ctr
MULTUS=$(sed -n 's/^MULTUS=//p' <<<"$bins")
[[ -n "$MULTUS" ]] || { say "no multus built (the Multus source is expected at ../shared/third_party/multus-cni)"; exit 1; }

say "API server and one node (npm run cluster -- up --nodes 1 --cni none)"
up=$(node tools/cluster/cluster.mjs up --nodes 1 --cni none)
export KUBECONFIG=$(sed -n 's/^KUBECONFIG=//p' <<<"$up")
node_line=$(grep '^NODE ' <<<"$up" | head -1)
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$node_line"; }
BIN=$(field CNI_BIN_DIR); CONF=$(field CNI_CONF_DIR); SOCK=$(field CONTAINERD_SOCKET)
for img in coil veth-router; do "$CTR" -a "${SOCK#unix://}" -n k8s.io images import "dist/images/$img.tar" >/dev/null; done

say "Coil: kubectl apply -f packages/coil/config/{crds,rbac,deploy}.yaml and an AddressPool"
"$KUBECTL" apply -f packages/coil/config/crds.yaml >/dev/null
"$KUBECTL" wait --for=condition=Established crd/addresspools.coil.cybozu.com --timeout=60s >/dev/null
"$KUBECTL" apply -f packages/coil/config/rbac.yaml -f packages/coil/config/deploy.yaml >/dev/null
"$KUBECTL" apply -f - >/dev/null <<'POOL'
{ "apiVersion": "coil.cybozu.com/v2", "kind": "AddressPool", "metadata": { "name": "default" },
  "spec": { "blockSizeBits": 5, "subnets": [ { "ipv4": "10.100.0.0/16" } ] } }
POOL
"$KUBECTL" wait --for=condition=Ready node --all --timeout=240s

say "Multus from its own DaemonSet (deployments/multus-daemonset.yml, image built from its source) in front of Coil"
MULTUS_SRC="${CNIKIT_MULTUS_SRC:-$ROOT/../shared/third_party/multus-cni}"
MULTUS_TAR=$(node tools/node-lab/multus-image.mjs "$(dirname "$MULTUS")" "$(dirname "$MULTUS")/multus-cni.tar" | cut -d' ' -f2)
"$CTR" -a "${SOCK#unix://}" -n k8s.io images import "$MULTUS_TAR" >/dev/null
# the reference macvlan and host-local, as a distribution's containernetworking-plugins package installs them
for p in /usr/lib/cni/macvlan /usr/lib/cni/host-local; do cp "$p" "$BIN/.tmp" && mv "$BIN/.tmp" "$BIN/$(basename "$p")"; done
"$KUBECTL" apply -f "$MULTUS_SRC/deployments/multus-daemonset.yml" >/dev/null
"$KUBECTL" -n kube-system rollout status daemonset/kube-multus-ds --timeout=180s >/dev/null
for _ in $(seq 120); do [[ -f "$CONF/00-multus.conflist" ]] && break; sleep 0.5; done
[[ -f "$CONF/00-multus.conflist" ]] || { say "Multus wrote no 00-multus.conflist into $CONF"; exit 1; }
say "veth and router from their DaemonSet; NetworkAttachmentDefinitions macvlan + veth, macvlan + router"
"$KUBECTL" apply -f packages/meta/config/install.yaml >/dev/null
"$KUBECTL" -n kube-system rollout status daemonset/cnikit-veth-router --timeout=180s >/dev/null
"$KUBECTL" apply -f packages/meta/config/nads.yaml >/dev/null
"$KUBECTL" apply -f - >/dev/null <<'POD'
{ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "demo", "annotations": { "k8s.v1.cni.cncf.io/networks": "macvlan-veth" } },
  "spec": { "terminationGracePeriodSeconds": 1, "containers": [ { "name": "bb", "image": "lab.local/busybox:1.35", "imagePullPolicy": "Never",
    "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"] } ] } }
POD
"$KUBECTL" wait --for=condition=Ready pod/demo --timeout=180s >/dev/null
"$KUBECTL" get nodes -o wide
"$KUBECTL" get pods -A -o wide
echo "--- kubectl exec demo -- ip -o -4 addr"
"$KUBECTL" exec demo -- ip -o -4 addr
echo "--- kubectl exec demo -- ip route get 10.0.0.1 (a Service address: through veth0)"
"$KUBECTL" exec demo -- ip route get 10.0.0.1
echo
echo "KUBECONFIG=$KUBECONFIG  kubectl: $KUBECTL"
echo "stop it with: npm run cluster -- down"
