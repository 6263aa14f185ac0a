// STATUS, which containerd 2.x runs for every plugin of a 1.1.0 conflist each time the kubelet asks the runtime
// for its status (every few seconds, on every node), against the bare start of the runtime the executables embed,
// alternated (issue 18's target: <= 1.1x). veth and router need no daemon: their STATUS parses the config.
// coil's asks coild, so coil.mjs measures it with coild up and prints a whole conflist's cost per minute.
import * as path from 'node:path';
import { alternate, alternateCpu, median, ms, ratio, table } from './lib/measure.mjs';

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

/** A STATUS call as containerd makes it: no container, the plugin's config on stdin. */
export const statusCall = (file, conf) => ({
  file,
  env: { CNI_COMMAND: 'STATUS', CNI_PATH: path.dirname(file), PATH: '/nonexistent' },
  input: JSON.stringify(conf),
});

export function run(ctx) {
  const bare = { file: ctx.node, args: ['-e', '0'], env: {} };
  const rows = [];
  ctx.statusCpuMs ??= {};
  for (const [name, conf] of Object.entries(CONFS)) {
    const file = ctx.executables(ctx.binDir).find((f) => path.basename(f) === name);
    if (!file) {
      ctx.skip(`no ${name} in ${ctx.binDir} (npm run build)`);
      continue;
    }
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
  }
  table(['plugin', 'STATUS', 'node -e 0', 'wall ratio', 'CPU ratio', `CPU at ${POLLS_PER_MINUTE} polls/min`], rows);
  console.log(`  (medians of ${ctx.runs} alternating pairs; CPU: perf stat task-clock; a whole conflist's cost is in coil's section)`);
}
