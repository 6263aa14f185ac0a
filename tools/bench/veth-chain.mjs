// Issue 2's benchmark (b) and issue 10's ADD target: ADD+DEL of macvlan + host-local
// + veth against the same chain without veth (Debian's Go plugins only), each in a
// fresh container netns, in a "host" netns whose veth end is the macvlan master.
// What veth adds is compared with the bare start of the runtime it embeds.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { runChain } from './lib/chain-report.mjs';

export const title = 'ADD+DEL macvlan+host-local+veth vs macvlan+host-local (targets: veth ADD and DEL <= 1.25x bare start)';
export const order = 30;

const GO = '/usr/lib/cni';

function ip(...args) {
  const r = spawnSync('ip', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr.trim()}`);
}

export function run(ctx) {
  const veth = path.join(ctx.binDir, 'veth');
  if (!fs.existsSync(veth)) return ctx.skip(`${veth} not built (npm run build)`);
  if (process.getuid?.() !== 0) return ctx.skip('needs root (network namespaces)');
  for (const p of ['macvlan', 'host-local'])
    if (!fs.existsSync(path.join(GO, p))) return ctx.skip(`${GO}/${p} missing (apt-get install containernetworking-plugins)`);

  const id = `cb${process.pid.toString(36)}`;
  const host = `${id}-host`;
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-bench-chain-'));
  const containers = [];
  try {
    // host netns: mvmaster (macvlan parent, 172.30.0.1/24) <-> mvpeer, both up
    ip('netns', 'add', host);
    ip('-n', host, 'link', 'add', 'mvmaster', 'type', 'veth', 'peer', 'name', 'mvpeer');
    ip('-n', host, 'addr', 'add', '172.30.0.1/24', 'dev', 'mvmaster');
    for (const l of ['lo', 'mvmaster', 'mvpeer']) ip('-n', host, 'link', 'set', l, 'up');
    const pairs = [];
    for (let i = 0; i < ctx.runs + 1; i++) {
      const pair = [`${id}-a${i}`, `${id}-b${i}`];
      pair.forEach((n) => {
        ip('netns', 'add', n);
        containers.push(n);
      });
      pairs.push(pair.map((n) => `/var/run/netns/${n}`));
    }
    const job = {
      node: ctx.node,
      cniVersion: '1.0.0',
      name: 'bench-chain',
      meta: 'veth',
      ifName: 'eth0',
      cniPath: `${GO}:${ctx.binDir}`,
      plugins: { macvlan: path.join(GO, 'macvlan'), veth },
      macvlan: {
        type: 'macvlan',
        master: 'mvmaster',
        mode: 'bridge',
        ipam: {
          type: 'host-local',
          dataDir: path.join(work, 'ipam'),
          ranges: [[{ subnet: '172.30.0.0/24', gateway: '172.30.0.1' }]],
          routes: [{ dst: '0.0.0.0/0' }],
        },
      },
      veth: {
        type: 'veth',
        overlay_hijack_subnet: ['10.244.0.0/16'],
        service_hijack_subnet: ['10.96.0.0/12'],
        log_options: { log_level: 'info', log_file: path.join(work, 'veth.log') },
      },
      netns: pairs,
      // The ADD's CPU time, measured apart (perf stat around the plugin would add to its wall time).
      cpuNetns: fs.existsSync('/usr/bin/perf')
        ? Array.from({ length: ctx.runs + 1 }, (_, i) => {
            const n = `${id}-c${i}`;
            ip('netns', 'add', n);
            containers.push(n);
            return `/var/run/netns/${n}`;
          })
        : [],
      // Peers of the veth pairs whose `ip link del` shows the kernel's part of a DEL.
      floorNetns: Array.from({ length: ctx.runs + 1 }, (_, i) => {
        const n = `${id}-f${i}`;
        ip('netns', 'add', n);
        containers.push(n);
        return n;
      }),
    };
    const res = runChain(ctx, host, job, 'each in a fresh netns');
    // Issue 18's limits (issue 10 asked 1.5x of the ADD).
    ctx.targets.push({ what: 'veth ADD (chained after macvlan)', limit: 1.25, wall: res.add, cpu: res.cpu.add });
    ctx.targets.push({
      what: 'veth DEL',
      limit: 1.25,
      wall: res.del,
      cpu: res.cpu.del,
      floor:
        res.unregisterFloor === undefined
          ? undefined
          : { ratio: res.unregisterFloor, why: "node -e 0 + the kernel's unregister of a veth pair" },
    });
  } finally {
    for (const n of [...containers, host]) spawnSync('ip', ['netns', 'del', n]);
    fs.rmSync(work, { recursive: true, force: true });
  }
}
