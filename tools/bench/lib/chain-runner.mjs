// Runs inside a benchmark's "host" network namespace (started by veth-chain.mjs or
// router-chain.mjs through `ip netns exec`), so plugins are executed directly, as a
// runtime on that node would: no `ip netns exec` in the timed path. Reads a job on
// argv[2] (JSON): `meta` names the chained plugin under test (veth, router), `ifName`
// the interface the chain is for; prints per-iteration timings as JSON.
import { spawnSync } from 'node:child_process';

const job = JSON.parse(process.argv[2]);
const meta = job.meta;

/**
 * One CNI call; returns [ms, parsed stdout]. Throws on a CNI error: a failing chain has no timing.
 * With `cpu`, runs it under perf stat and returns its CPU time (task-clock) instead of wall time.
 */
function call(plugin, command, netns, conf, cpu = false) {
  const env = {
    CNI_COMMAND: command,
    CNI_CONTAINERID: `b${netns.slice(-6)}-${netns.split('/').pop()}`,
    CNI_NETNS: netns,
    CNI_IFNAME: job.ifName,
    CNI_PATH: job.cniPath,
    PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
  };
  const [file, args] = cpu ? [PERF, [...PERF_ARGS, job.plugins[plugin]]] : [job.plugins[plugin], []];
  const t0 = process.hrtime.bigint();
  const r = spawnSync(file, args, { env, input: JSON.stringify(conf), encoding: 'utf8' });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (r.status !== 0) throw new Error(`${plugin} ${command} in ${netns} exited ${r.status}: ${r.stdout}${r.stderr}`);
  return [cpu ? taskClock(r.stderr) : ms, r.stdout.trim() ? JSON.parse(r.stdout) : undefined];
}

const PERF = '/usr/bin/perf';
const PERF_ARGS = ['stat', '-x,', '-e', 'task-clock'];
const taskClock = (stderr) => Number(/^([0-9.]+),msec,task-clock/m.exec(stderr)?.[1] ?? NaN);

/** CPU time of the meta-plugin's ADD and DEL (the chain around them untimed), for job.cpuNetns. */
function metaCpu(netns) {
  const base = { cniVersion: job.cniVersion, name: job.name };
  const mv = { ...base, ...job.macvlan };
  const [, mvResult] = call('macvlan', 'ADD', netns, mv);
  const [add, result] = call(meta, 'ADD', netns, { ...base, ...job[meta], prevResult: mvResult }, true);
  const [del] = call(meta, 'DEL', netns, { ...base, ...job[meta], prevResult: result }, true);
  call('macvlan', 'DEL', netns, { ...mv, prevResult: result });
  return { add, del };
}

/**
 * The kernel's part of deleting a veth pair whose peer is in job.floorNetns[i]: it unregisters both
 * ends and waits for an RCU grace period inside that one netlink call, so any plugin that deletes a
 * pair waits as long. Measured as the wall time of `ip link del` less that of `ip link show` of the
 * same link just before (ip's own start and one netlink exchange).
 */
function linkDelFloor(i) {
  const peerNs = job.floorNetns[i];
  const run = (args) => {
    const t0 = process.hrtime.bigint();
    const r = spawnSync('ip', args, { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr}`);
    return Number(process.hrtime.bigint() - t0) / 1e6;
  };
  run(['link', 'add', 'floorh', 'type', 'veth', 'peer', 'name', 'floorp', 'netns', peerNs]);
  run(['link', 'set', 'floorh', 'up']);
  const show = run(['link', 'show', 'dev', 'floorh']);
  return Math.max(0, run(['link', 'del', 'floorh']) - show);
}

/** ADD then DEL of the chain in one pod netns, as libcni runs a conflist (DEL in reverse). */
function chain(netns, withMeta) {
  const base = { cniVersion: job.cniVersion, name: job.name };
  const mv = { ...base, ...job.macvlan };
  const t = { total: 0 };
  const [a1, mvResult] = call('macvlan', 'ADD', netns, mv);
  t.total += a1;
  let result = mvResult;
  if (withMeta) {
    const [a2, metaResult] = call(meta, 'ADD', netns, { ...base, ...job[meta], prevResult: mvResult });
    t.metaAdd = a2;
    t.total += a2;
    result = metaResult;
    const [d2] = call(meta, 'DEL', netns, { ...base, ...job[meta], prevResult: result });
    t.metaDel = d2;
    t.total += d2;
  }
  const [d1] = call('macvlan', 'DEL', netns, { ...mv, prevResult: result });
  t.total += d1;
  return t;
}

function bare(cpu = false) {
  const t0 = process.hrtime.bigint();
  const r = cpu
    ? spawnSync(PERF, [...PERF_ARGS, job.node, '-e', '0'], { env: {}, encoding: 'utf8' })
    : spawnSync(job.node, ['-e', '0'], { env: {} });
  return cpu ? taskClock(r.stderr) : Number(process.hrtime.bigint() - t0) / 1e6;
}

// Alternate with/without the meta-plugin (and the bare runtime start) so drift hits all alike.
const out = { withMeta: [], without: [], bare: [], linkDel: [] };
job.netns.forEach((pair, i) => {
  const order = i % 2 === 0 ? [true, false] : [false, true];
  for (const v of order) (v ? out.withMeta : out.without).push(chain(v ? pair[0] : pair[1], v));
  out.bare.push(bare());
  if (job.floorNetns) out.linkDel.push(linkDelFloor(i));
});
// Then CPU time of the meta-plugin's ADD and DEL against the bare start, alternated (when perf exists).
out.cpu = { add: [], del: [], b: [] };
(job.cpuNetns ?? []).forEach((netns, i) => {
  if (i % 2) out.cpu.b.push(bare(true));
  const { add, del } = metaCpu(netns);
  out.cpu.add.push(add);
  out.cpu.del.push(del);
  if (!(i % 2)) out.cpu.b.push(bare(true));
});
process.stdout.write(JSON.stringify(out));
