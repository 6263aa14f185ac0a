// STATUS, which containerd 2.x runs for every plugin of a 1.1.0 conflist each time the kubelet asks the runtime
// for its status (every few seconds, on every node), against the bare start of the runtime the executables embed,
// alternated (issue 18's target: <= 1.1x). veth and router need no daemon: their STATUS parses the config. terway
// and cilium-eni-ipam ask their node daemon: here a stand-in (tools/build/training/stand-ins.mjs) answers at once,
// so the figure is the plugin's own cost. coil's asks coild, so coil.mjs measures it with coild up and prints a
// whole conflist's cost per minute. gcp-ipam's reads its IPPool from the API server (not measured here).
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { alternate, alternateCpu, median, ms, ratio, table } from './lib/measure.mjs';
import { grpcStandIn, jsonLineStandIn } from '../build/training/stand-ins.mjs';

export const title = 'STATUS call vs bare runtime start (target <= 1.1x); CPU a node spends per minute on it';
export const order = 12;

/** How often the kubelet's runtime status poll makes containerd run STATUS (its default period: 5 s). */
export const POLLS_PER_MINUTE = 12;

/** Each plugin's entry of packages/meta/config/nads.yaml, as containerd hands it over: name and version merged in. */
const HIJACK = { overlay_hijack_subnet: ['10.100.0.0/16'], service_hijack_subnet: ['10.0.0.0/24'] };
const CONFS = {
  veth: { cniVersion: '1.1.0', name: 'macvlan-veth', type: 'veth', ...HIJACK },
  router: { cniVersion: '1.1.0', name: 'macvlan-router', type: 'router', ...HIJACK },
};

/** The daemons' stand-ins and the plugins' configs naming their sockets (as each family's config/deploy.yaml does). */
const WITH_DAEMON = {
  terway: async (dir) => {
    const socket = path.join(dir, 'eni.socket');
    return { daemon: await grpcStandIn(socket), conf: { cniVersion: '1.1.0', name: 'terway', type: 'terway', socket } };
  },
  'cilium-eni-ipam': async (dir) => {
    const socket = path.join(dir, 'agent.sock');
    return {
      daemon: await jsonLineStandIn(socket, { ok: true, pool: 8, used: 0, free: 8 }),
      conf: { cniVersion: '1.1.0', name: 'cilium', type: 'ptp', ipam: { type: 'cilium-eni-ipam', socket } },
    };
  },
};

/** A STATUS call as containerd makes it: no container, the plugin's config on stdin. */
export const statusCall = (file, conf) => ({
  file,
  env: { CNI_COMMAND: 'STATUS', CNI_PATH: path.dirname(file), PATH: '/nonexistent' },
  input: JSON.stringify(conf),
});

export async function run(ctx) {
  const bare = { file: ctx.node, args: ['-e', '0'], env: {} };
  const rows = [];
  ctx.statusCpuMs ??= {};
  const measure = (name, conf) => {
    const file = ctx.executables(ctx.binDir).find((f) => path.basename(f) === name);
    if (!file) return ctx.skip(`no ${name} in ${ctx.binDir} (npm run build)`);
    const call = statusCall(file, conf);
    const wall = alternate(call, bare, ctx.runs);
    const cpu = alternateCpu(call, bare, ctx.runs);
    ctx.targets.push({ what: `STATUS ${name}`, limit: 1.1, wall, cpu });
    const cpuMs = cpu ? median(cpu.a) : undefined;
    if (cpuMs !== undefined) ctx.statusCpuMs[name] = cpuMs;
    rows.push([
      name,
      ms(median(wall.a)),
      ms(median(wall.b)),
      ratio(median(wall.ratios)),
      cpu ? ratio(median(cpu.ratios)) : '-',
      cpuMs === undefined ? '-' : `${ms(cpuMs * POLLS_PER_MINUTE)}/min`,
    ]);
  };
  for (const [name, conf] of Object.entries(CONFS)) measure(name, conf);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-bench-status-'));
  try {
    for (const [name, start] of Object.entries(WITH_DAEMON)) {
      const { daemon, conf } = await start(dir);
      try {
        measure(name, conf);
      } finally {
        daemon.stop();
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  table(['plugin', 'STATUS', 'node -e 0', 'wall ratio', 'CPU ratio', `CPU at ${POLLS_PER_MINUTE} polls/min`], rows);
  console.log(`  (medians of ${ctx.runs} alternating pairs; CPU: perf stat task-clock; a whole conflist's cost is in coil's section)`);
}
