// Runs inside a benchmark's "host" network namespace (started by veth-chain.mjs or
// router-chain.mjs through `ip netns exec`), so plugins are executed directly, as a
// runtime on that node would: no `ip netns exec` in the timed path. Reads a job on
// argv[2] (JSON): `meta` names the chained plugin under test (veth, router), `ifName`
// the interface the chain is for; prints per-iteration timings as JSON.
import { spawnSync } from 'node:child_process';

const job = JSON.parse(process.argv[2]);
const meta = job.meta;

/** One CNI call; returns [ms, parsed stdout]. Throws on a CNI error: a failing chain has no timing. */
function call(plugin, command, netns, conf) {
  const env = {
    CNI_COMMAND: command, CNI_CONTAINERID: `b${netns.slice(-6)}-${netns.split("/").pop()}`, CNI_NETNS: netns,
    CNI_IFNAME: job.ifName, CNI_PATH: job.cniPath, PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
  };
  const t0 = process.hrtime.bigint();
  const r = spawnSync(job.plugins[plugin], [], { env, input: JSON.stringify(conf), encoding: 'utf8' });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (r.status !== 0) throw new Error(`${plugin} ${command} in ${netns} exited ${r.status}: ${r.stdout}${r.stderr}`);
  return [ms, r.stdout.trim() ? JSON.parse(r.stdout) : undefined];
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

function bare() {
  const t0 = process.hrtime.bigint();
  spawnSync(job.node, ['-e', '0'], { env: {} });
  return Number(process.hrtime.bigint() - t0) / 1e6;
}

// Alternate with/without the meta-plugin (and the bare runtime start) so drift hits all alike.
const out = { withMeta: [], without: [], bare: [] };
job.netns.forEach((pair, i) => {
  const order = i % 2 === 0 ? [true, false] : [false, true];
  for (const v of order) (v ? out.withMeta : out.without).push(chain(v ? pair[0] : pair[1], v));
  out.bare.push(bare());
});
process.stdout.write(JSON.stringify(out));
