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

say "Multus in front of Coil, veth and router from their DaemonSet, a NetworkAttachmentDefinition macvlan + veth"
for p in "$MULTUS" /usr/lib/cni/macvlan /usr/lib/cni/host-local; do cp "$p" "$BIN/.tmp" && mv "$BIN/.tmp" "$BIN/$(basename "$p")"; done
printf '{"cniVersion":"1.1.0","name":"multus-cni-network","type":"multus","kubeconfig":"%s","clusterNetwork":"/etc/cni/net.d/10-coil.conflist"}\n' \
  "$KUBECONFIG" >"$CONF/.00-multus.conf" && mv "$CONF/.00-multus.conf" "$CONF/00-multus.conf"
node -e "const y=require('js-yaml');const d=y.loadAll(require('fs').readFileSync('../shared/third_party/multus-cni/deployments/multus-daemonset.yml','utf8'));
console.log(JSON.stringify({apiVersion:'v1',kind:'List',items:d.filter(x=>x&&x.kind==='CustomResourceDefinition')}))" | "$KUBECTL" apply -f - >/dev/null
"$KUBECTL" wait --for=condition=Established crd/network-attachment-definitions.k8s.cni.cncf.io --timeout=60s >/dev/null
"$KUBECTL" apply -f packages/meta/config/install.yaml >/dev/null
"$KUBECTL" -n kube-system rollout status daemonset/cnikit-veth-router --timeout=180s >/dev/null
"$KUBECTL" apply -f - >/dev/null <<'NAD'
{ "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition", "metadata": { "name": "macvlan-veth", "namespace": "default" },
  "spec": { "config": "{\"cniVersion\":\"1.0.0\",\"name\":\"macvlan-veth\",\"plugins\":[{\"type\":\"macvlan\",\"master\":\"eth0\",\"mode\":\"bridge\",\"ipam\":{\"type\":\"host-local\",\"ranges\":[[{\"subnet\":\"198.51.100.0/24\",\"rangeStart\":\"198.51.100.100\",\"rangeEnd\":\"198.51.100.149\"}]]}},{\"type\":\"veth\",\"overlay_hijack_subnet\":[\"10.100.0.0/16\"],\"service_hijack_subnet\":[\"10.0.0.0/24\"]}]}" } }
NAD
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
