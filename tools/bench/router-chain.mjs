// Issue 3's benchmark: ADD+DEL of a Multus-style secondary network, macvlan +
// host-local + router, against the same chain without router (Debian's Go plugins
// only), each in a fresh pod netns whose eth0 already comes from an "overlay" (a veth
// on a cni0 bridge, as Debian's bridge plugin leaves it). What router adds to the
// chain is compared with the bare start of the runtime it embeds. Printed, never
// asserted: the machine is shared and noisy.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { runChain } from './lib/chain-report.mjs';

export const title = "ADD+DEL macvlan+host-local+router vs macvlan+host-local, on an overlay pod; router's share vs the bare runtime start";
export const order = 31;

const GO = '/usr/lib/cni';

function ip(...args) {
  const r = spawnSync('ip', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr.trim()}`);
}

export function run(ctx) {
  const router = path.join(ctx.binDir, 'router');
  if (!fs.existsSync(router)) return ctx.skip(`${router} not built (npm run build)`);
  if (process.getuid?.() !== 0) return ctx.skip('needs root (network namespaces)');
  for (const p of ['macvlan', 'host-local'])
    if (!fs.existsSync(path.join(GO, p))) return ctx.skip(`${GO}/${p} missing (apt-get install containernetworking-plugins)`);

  const id = `rb${process.pid.toString(36)}`;
  const host = `${id}-host`;
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-bench-router-'));
  const pods = [];
  try {
    // host netns: mvmaster (macvlan parent, node IP 172.30.0.1/24) <-> mvpeer; cni0 10.244.0.1/24 (the overlay)
    ip('netns', 'add', host);
    ip('-n', host, 'link', 'add', 'mvmaster', 'type', 'veth', 'peer', 'name', 'mvpeer');
    ip('-n', host, 'addr', 'add', '172.30.0.1/24', 'dev', 'mvmaster');
    ip('-n', host, 'link', 'add', 'cni0', 'type', 'bridge');
    ip('-n', host, 'addr', 'add', '10.244.0.1/24', 'dev', 'cni0');
    for (const l of ['lo', 'mvmaster', 'mvpeer', 'cni0']) ip('-n', host, 'link', 'set', l, 'up');
    const runs = Math.min(ctx.runs, 100);
    const pairs = [];
    // A pod with its eth0 from the overlay, untimed: what the cluster network left before Multus' secondary one.
    const overlayPod = (n, hostEnd, address) => {
      ip('netns', 'add', n);
      pods.push(n);
      ip('-n', host, 'link', 'add', hostEnd, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', n);
      ip('-n', host, 'link', 'set', hostEnd, 'master', 'cni0', 'up');
      ip('-n', n, 'addr', 'add', `${address}/16`, 'dev', 'eth0');
      ip('-n', n, 'link', 'set', 'eth0', 'up');
      ip('-n', n, 'route', 'add', 'default', 'via', '10.244.0.1', 'dev', 'eth0');
      return `/var/run/netns/${n}`;
    };
    for (let i = 0; i < runs + 1; i++) {
      pairs.push([overlayPod(`${id}-a${i}`, `ov${i}a`, `10.244.1.${10 + i}`), overlayPod(`${id}-b${i}`, `ov${i}b`, `10.244.2.${10 + i}`)]);
    }
    // The ADD's and DEL's CPU time, measured apart (perf stat around the plugin would add to its wall time).
    const cpuNetns = fs.existsSync('/usr/bin/perf')
      ? Array.from({ length: runs + 1 }, (_, i) => overlayPod(`${id}-c${i}`, `ov${i}c`, `10.244.3.${10 + i}`))
      : [];
    ip('-n', host, 'addr', 'del', '10.244.0.1/24', 'dev', 'cni0');
    ip('-n', host, 'addr', 'add', '10.244.0.1/16', 'dev', 'cni0');
    const job = {
      node: ctx.node,
      cniVersion: '1.0.0',
      name: 'bench-router',
      meta: 'router',
      ifName: 'net1',
      cniPath: `${GO}:${ctx.binDir}`,
      plugins: { macvlan: path.join(GO, 'macvlan'), router },
      macvlan: {
        type: 'macvlan',
        master: 'mvmaster',
        mode: 'bridge',
        ipam: {
          type: 'host-local',
          dataDir: path.join(work, 'ipam'),
          ranges: [[{ subnet: '172.30.0.0/24', gateway: '172.30.0.254' }]],
          routes: [{ dst: '0.0.0.0/0' }],
        },
      },
      router: {
        type: 'router',
        overlay_hijack_subnet: ['10.244.0.0/16'],
        service_hijack_subnet: ['10.96.0.0/12'],
        log_options: { log_level: 'info', log_file: path.join(work, 'router.log') },
      },
      netns: pairs,
      cpuNetns,
    };
    const res = runChain(ctx, host, job, 'each chain in a fresh pod netns with an overlay eth0');
    ctx.targets.push({ what: 'router ADD (chained after macvlan)', limit: 1.25, wall: res.add, cpu: res.cpu.add });
    ctx.targets.push({ what: 'router DEL', limit: 1.25, wall: res.del, cpu: res.cpu.del });
  } finally {
    for (const n of [...pods, host]) spawnSync('ip', ['netns', 'del', n]);
    fs.rmSync(work, { recursive: true, force: true });
  }
}
