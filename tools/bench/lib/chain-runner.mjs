// Runs inside the benchmark's "host" network namespace (started by veth-chain.mjs
// through `ip netns exec`), so plugins are executed directly, as a runtime on that
// node would: no `ip netns exec` in the timed path. Reads a job on argv[2] (JSON),
// prints per-iteration timings as JSON.
import { spawnSync } from 'node:child_process';

const job = JSON.parse(process.argv[2]);

/** One CNI call; returns [ms, parsed stdout]. Throws on a CNI error: a failing chain has no timing. */
function call(plugin, command, netns, conf) {
  const env = {
    CNI_COMMAND: command, CNI_CONTAINERID: `bench${netns.slice(-6)}`, CNI_NETNS: netns,
    CNI_IFNAME: 'eth0', CNI_PATH: job.cniPath, PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
  };
  const t0 = process.hrtime.bigint();
  const r = spawnSync(job.plugins[plugin], [], { env, input: JSON.stringify(conf), encoding: 'utf8' });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (r.status !== 0) throw new Error(`${plugin} ${command} in ${netns} exited ${r.status}: ${r.stdout}${r.stderr}`);
  return [ms, r.stdout.trim() ? JSON.parse(r.stdout) : undefined];
}

/** ADD then DEL of the chain in one fresh netns, as libcni runs a conflist (DEL in reverse). */
function chain(netns, withVeth) {
  const base = { cniVersion: job.cniVersion, name: job.name };
  const mv = { ...base, ...job.macvlan };
  const t = { total: 0 };
  const [a1, mvResult] = call('macvlan', 'ADD', netns, mv);
  t.total += a1;
  let result = mvResult;
  if (withVeth) {
    const [a2, vethResult] = call('veth', 'ADD', netns, { ...base, ...job.veth, prevResult: mvResult });
    t.vethAdd = a2;
    t.total += a2;
    result = vethResult;
    const [d2] = call('veth', 'DEL', netns, { ...base, ...job.veth, prevResult: result });
    t.vethDel = d2;
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

// Alternate with/without veth (and the bare runtime start) so drift hits all alike.
const out = { withVeth: [], without: [], bare: [] };
job.netns.forEach((pair, i) => {
  const order = i % 2 === 0 ? [true, false] : [false, true];
  for (const v of order) (v ? out.withVeth : out.without).push(chain(v ? pair[0] : pair[1], v));
  out.bare.push(bare());
});
process.stdout.write(JSON.stringify(out));
