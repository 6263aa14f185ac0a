#!/usr/bin/env bash
# Builds, once per version, what a real Kubernetes node of the lab runs (docs: tools/node-lab/README.md):
#   kubelet + kube-scheduler   tools/cluster/build.sh node (same release and wrapper module as the API server)
#   containerd, containerd-shim-runc-v2, ctr   github.com/containerd/containerd/v2 (pure Go, cgo off)
#   crictl                     sigs.k8s.io/cri-tools
# runc, the CNI reference plugins and busybox come from Debian (tools/ci/setup.sh installs them).
#
# Cached outside the repo like the control plane, keyed by version:
#   ${CNIKIT_CACHE:-~/.cache/cnikit}/containerd/<version>/, .../crictl/<version>/, .../k8s/<k8s version>-node/
# Idempotent: a second run finds the caches and only prints where the binaries are (KEY=path lines on stdout).
#
# Env: CNIKIT_CONTAINERD_VERSION, CNIKIT_CRICTL_VERSION (defaults below), CNIKIT_K8S_VERSION, CNIKIT_BUILD_NICE.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONTAINERD_VERSION="${CNIKIT_CONTAINERD_VERSION:-v2.4.2}"
CRICTL_VERSION="${CNIKIT_CRICTL_VERSION:-v1.37.0}"
CACHE="${CNIKIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cnikit}"
NICE="${CNIKIT_BUILD_NICE:-10}"

log() { echo "node-lab/build: $*" >&2; }

# go_install <name> <version> <module path> <ldflags> <tags> <package>...: one cached set of binaries.
go_install() {
  local name=$1 version=$2 module=$3 ldflags=$4 tags=$5
  shift 5
  local dest="$CACHE/$name/$version" p b ok=1
  for p in "$@"; do [[ -x "$dest/$(basename "$p")" ]] || ok=0; done
  if [[ $ok == 1 && -f "$dest/.complete" ]]; then log "cached: $name $version in $dest"; return; fi
  command -v go >/dev/null || { log "go not found on PATH (needed to build $name $version)"; exit 1; }
  mkdir -p "$CACHE/$name"
  exec 8>"$CACHE/$name/.build-$version.lock"
  flock 8
  if [[ -f "$dest/.complete" ]]; then log "cached (built by a concurrent run): $dest"; exec 8>&-; return; fi
  local out="$CACHE/$name/.work-$version" start
  start=$(date +%s)
  rm -rf "$out"; mkdir -p "$out"
  log "building $name $version (go install; the first build takes minutes on 2 cores)"
  local pkgs=()
  for p in "$@"; do pkgs+=("$module/$p@$version"); done
  # go install pkg@version builds in module mode from the proxy with the module's own go.mod: no wrapper needed.
  (cd "$out" && GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -buildvcs=false" CGO_ENABLED=0 GOBIN="$out" \
    nice -n "$NICE" go install -trimpath -tags "$tags" -ldflags "$ldflags" "${pkgs[@]}")
  for p in "$@"; do b=$(basename "$p"); [[ -x "$out/$b" ]] || { log "$b missing after go install"; exit 1; }; done
  echo "$name=$version go=$(go env GOVERSION) built=$(date -u +%FT%TZ) seconds=$(( $(date +%s) - start ))" > "$out/.complete"
  rm -rf "$dest"; mv "$out" "$dest"
  log "built $name $version in $(( $(date +%s) - start ))s"
  exec 8>&-
}

bash "$HERE/../cluster/build.sh" node
go_install containerd "$CONTAINERD_VERSION" github.com/containerd/containerd/v2 \
  "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" "no_btrfs no_devmapper no_zfs" \
  cmd/containerd cmd/containerd-shim-runc-v2 cmd/ctr
go_install crictl "$CRICTL_VERSION" sigs.k8s.io/cri-tools \
  "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" "" cmd/crictl

# The real Multus thin plugin, from the source tree beside the repository (shared/third_party/multus-cni; never
# vendored here), cached by a digest of its sources.
MULTUS_SRC="${CNIKIT_MULTUS_SRC:-$HERE/../../../shared/third_party/multus-cni}"
if [[ -f "$MULTUS_SRC/go.mod" ]]; then
  key=$(cd "$MULTUS_SRC" && find go.mod go.sum cmd pkg -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
  dest="$CACHE/multus/$key"
  if [[ ! -x "$dest/passthru" ]]; then
    mkdir -p "$CACHE/multus"
    exec 7>"$CACHE/multus/.build.lock"
    flock 7
    if [[ ! -x "$dest/passthru" ]]; then
      start=$(date +%s)
      log "building multus (thin plugin) from $MULTUS_SRC"
      out="$CACHE/multus/.work-$key"
      rm -rf "$out"
      # multus: the thin plugin; install_multus, thin_entrypoint and passthru: what its DaemonSet image holds
      # besides (multus-image.mjs writes that image from these four; passthru last: the cache's completion mark).
      for prog in multus:multus install_multus:install_multus thin_entrypoint:thin_entrypoint passthru:passthru-cni; do
        (cd "$MULTUS_SRC" && GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -buildvcs=false" CGO_ENABLED=0 \
          nice -n "$NICE" go build -trimpath -ldflags "-s -w" -o "$out/${prog%%:*}" "./cmd/${prog#*:}")
      done
      rm -rf "$dest"; mv "$out" "$dest"
      log "built multus in $(( $(date +%s) - start ))s"
    fi
    exec 7>&-
  fi
  echo "MULTUS=$dest/multus"
else
  log "no Multus source at $MULTUS_SRC (set CNIKIT_MULTUS_SRC): nodes get no multus"
fi

echo "CONTAINERD_BIN_DIR=$CACHE/containerd/$CONTAINERD_VERSION"
echo "CRICTL=$CACHE/crictl/$CRICTL_VERSION/crictl"
