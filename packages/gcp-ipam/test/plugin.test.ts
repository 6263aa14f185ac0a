// The IPAM plugin's verbs, run in-process through netlib's dispatcher against a real API server and the fake
// GCE: ADD/DEL/CHECK/GC/STATUS in every CNI version that has them, coalescing, cloud errors, rollback.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { API_VERSION } from '../src/types';
import {
  addNode,
  allocations,
  callPlugin,
  createPod,
  createPool,
  ipamConf,
  kube,
  netConf,
  newFake,
  nodeConf,
  parseOut,
  uniqueName,
  useCrds,
  ZONE,
  type NodeSetup,
} from './support';
import type { FakeGce } from '@cnikit/gce-emulator';

let fake: FakeGce;
useCrds();
beforeEach(async () => {
  fake = await newFake({ opDurationMs: 100 });
});
afterEach(async () => {
  await fake.stop();
});

const node = (name?: string): NodeSetup => addNode(fake, name);

for (const v of ['0.4.0', '1.0.0', '1.1.0']) {
  test(`[${v}] ADD returns ip/gateway/route and attaches the alias; CHECK passes; DEL releases both`, async () => {
    const pool = await createPool('10.111.0.0/24');
    const n = node();
    const pod = await createPod('default', uniqueName('p'));
    const stdin = netConf(ipamConf(fake, pool.metadata.name, n), v);
    const o = { containerId: uniqueName('c'), pod: { namespace: 'default', name: pod.metadata.name! } };
    const out = await callPlugin('ADD', stdin, o);
    expect(out.stderr + out.stdout).not.toMatch(/"code"/);
    expect(out.exitCode).toBe(0);
    const r = parseOut(out);
    const address = r.ips![0]!.address;
    expect(address).toMatch(/^10\.111\.0\.\d+\/24$/);
    expect(r.ips![0]!.gateway).toBe('10.111.0.1');
    expect(r.routes).toEqual([{ dst: '0.0.0.0/0', gw: '10.111.0.1' }]);
    const ip = address.split('/')[0]!;
    expect(fake.aliasesOf(ZONE, n.instance)).toEqual([`${ip}/32`]);
    const allocs = await allocations(pool.metadata.name);
    expect(allocs).toHaveLength(1);
    expect(allocs[0]!.spec).toMatchObject({
      ip,
      podName: pod.metadata.name,
      podNamespace: 'default',
      podUID: pod.metadata.uid,
      nodeName: n.node,
      phase: 'Allocated',
    });

    const prev = netConf(ipamConf(fake, pool.metadata.name, n), v, { prevResult: JSON.parse(out.stdout) });
    expect((await callPlugin('CHECK', prev, o)).exitCode).toBe(0);
    expect((await callPlugin('DEL', prev, o)).exitCode).toBe(0);
    expect(fake.aliasesOf(ZONE, n.instance)).toEqual([]);
    expect(await allocations(pool.metadata.name)).toHaveLength(0);
    // DEL again (and without prevResult): still success
    expect((await callPlugin('DEL', stdin, o)).exitCode).toBe(0);
    const chk = parseOut(await callPlugin('CHECK', prev, o));
    expect(chk.code).toBe(122);
  });
}

test('CHECK fails when the alias disappeared from the VM', async () => {
  const pool = await createPool('10.111.1.0/24');
  const n = node();
  const stdin = nodeConf(fake, pool.metadata.name, n);
  const o = { containerId: uniqueName('c') };
  expect((await callPlugin('ADD', stdin, o)).exitCode).toBe(0);
  fake.instances.get(`${ZONE}/${n.instance}`)!.networkInterfaces[0]!.aliasIpRanges = [];
  const r = parseOut(await callPlugin('CHECK', stdin, o));
  expect(r.code).toBe(123);
  expect(r.msg).toMatch(/alias IP not attached/);
});

test('30 concurrent ADDs on one node coalesce into a few updateNetworkInterface calls; no duplicate', async () => {
  fake.opDurationMs = 1000;
  const pool = await createPool('10.111.2.0/24');
  const n = node();
  const stdin = nodeConf(fake, pool.metadata.name, n);
  fake.resetCounters();
  const t0 = Date.now();
  const outs = await Promise.all(Array.from({ length: 30 }, (_, i) => callPlugin('ADD', stdin, { containerId: `c30-${i}` })));
  const ms = Date.now() - t0;
  for (const o of outs) expect(o.stdout).not.toMatch(/"code"/);
  const ips = outs.map((o) => parseOut(o).ips![0]!.address);
  expect(new Set(ips).size).toBe(30);
  expect(fake.aliasesOf(ZONE, n.instance)).toHaveLength(30);
  const calls = fake.calls['instances.updateNetworkInterface'] ?? 0;
  process.stderr.write(`coalescing: 30 ADDs, 1 s operations: ${calls} updateNetworkInterface calls, all ready in ${ms} ms\n`);
  // Coalesced: fewer calls than pods (2 on an idle machine). How many depends on how arrivals spread under
  // load, so only the behaviour is asserted; npm run bench (gcp-ipam) prints the figure.
  expect(calls).toBeLessThan(30);
  // and 30 DELs at once
  fake.resetCounters();
  const dels = await Promise.all(Array.from({ length: 30 }, (_, i) => callPlugin('DEL', stdin, { containerId: `c30-${i}` })));
  for (const d of dels) expect(d.exitCode).toBe(0);
  expect(fake.aliasesOf(ZONE, n.instance)).toEqual([]);
  expect(fake.calls['instances.updateNetworkInterface'] ?? 0).toBeLessThan(30);
  expect(await allocations(pool.metadata.name)).toHaveLength(0);
});

test('cloud errors: 403 rateLimitExceeded and 412 are retried; a 400 fails ADD and frees the IP', async () => {
  const pool = await createPool('10.111.3.0/24');
  const n = node();
  const stdin = nodeConf(fake, pool.metadata.name, n);
  fake.inject('instances.updateNetworkInterface', { status: 403, reason: 'rateLimitExceeded' }, 1);
  const ok = await callPlugin('ADD', stdin, { containerId: 'rl-1' });
  expect(ok.stdout).not.toMatch(/"code"/);
  fake.inject('instances.updateNetworkInterface', { status: 412, reason: 'conditionNotMet' }, 2);
  expect((await callPlugin('ADD', stdin, { containerId: 'st-1' })).stdout).not.toMatch(/"code"/);
  fake.inject(
    'instances.updateNetworkInterface',
    { status: 400, reason: 'invalid', message: 'Invalid value for field resource.aliasIpRanges' },
    1,
  );
  const bad = parseOut(await callPlugin('ADD', stdin, { containerId: 'bad-1' }));
  expect(bad.code).toBe(120);
  expect(bad.details).toMatch(/Invalid value/);
  expect(await allocations(pool.metadata.name)).toHaveLength(2);
  expect(fake.aliasesOf(ZONE, n.instance)).toHaveLength(2);
});

test('rate limits that persist give code 11 (try again later) and leave nothing behind', async () => {
  const pool = await createPool('10.111.4.0/24');
  const n = node();
  const stdin = netConf(ipamConf(fake, pool.metadata.name, n, { rateLimitBackoffMs: 10 }));
  fake.inject('instances.get', { status: 403, reason: 'rateLimitExceeded' }, 8);
  const r = parseOut(await callPlugin('ADD', stdin, { containerId: 'rl-x' }));
  expect(r.code).toBe(11);
  // the message names the cause (the kubelet's event shows it to the user of the waiting pod)
  expect(r.msg).toBe('gcp-ipam: GCE rate limit exceeded, try again');
  expect(await allocations(pool.metadata.name)).toHaveLength(0);
  // STATUS says so until the quota refills (recorded as the start of the next minute), then lets ADDs try again
  const record = path.join(n.stateDir, 'alias', `${n.instance}.nic0`, 'cloud.json');
  const h = JSON.parse(fs.readFileSync(record, 'utf8')) as { at: number; retryAt: number };
  expect(h.retryAt % 60_000).toBe(0);
  expect(h.retryAt - h.at).toBeGreaterThan(0);
  expect(h.retryAt - h.at).toBeLessThanOrEqual(60_000);
  fs.writeFileSync(record, JSON.stringify({ ...h, retryAt: Date.now() + 3_600_000 })); // not this minute's end: no race with the clock
  const st = parseOut(await callPlugin('STATUS', stdin, { containerId: '' }));
  expect(st).toMatchObject({ code: 50, msg: 'gcp-ipam: GCE rate limit exceeded, try again' });
  expect(st.details).toMatch(/rateLimitExceeded/);
  fs.writeFileSync(record, JSON.stringify({ ...h, retryAt: Date.now() - 1 }));
  expect((await callPlugin('STATUS', stdin, { containerId: '' })).exitCode).toBe(0);
});

test('a cloud outage: STATUS fails (50) while GCE does not answer a read of the VM, and clears once it does', async () => {
  const pool = await createPool('10.111.7.0/24');
  const n = node();
  const stdin = netConf(ipamConf(fake, pool.metadata.name, n, { rateLimitBackoffMs: 10 }));
  expect((await callPlugin('STATUS', stdin, { containerId: '' })).exitCode).toBe(0);
  const reads = (): number => fake.calls['instances.get'] ?? 0;
  const before = reads();
  expect((await callPlugin('STATUS', stdin, { containerId: '' })).exitCode).toBe(0);
  expect(reads()).toBe(before); // a healthy node's STATUS costs the cloud nothing
  fake.inject('instances.get', { status: 503, reason: 'backendError' }, 9);
  expect(parseOut(await callPlugin('ADD', stdin, { containerId: 'out-1' }))).toMatchObject({
    code: 11,
    msg: 'gcp-ipam: cloud API unavailable, try again',
  });
  const st = parseOut(await callPlugin('STATUS', stdin, { containerId: '' }));
  expect(st).toMatchObject({ code: 50, msg: 'gcp-ipam: cloud API unavailable' });
  expect(st.details).toMatch(/503/);
  expect((await callPlugin('STATUS', stdin, { containerId: '' })).exitCode).toBe(0);
  expect((await callPlugin('STATUS', stdin, { containerId: '' })).exitCode).toBe(0);
  expect(parseOut(await callPlugin('ADD', stdin, { containerId: 'out-2' })).ips).toHaveLength(1);
});

test('GC releases allocations the runtime no longer knows, keeps the valid ones, updates pool status', async () => {
  const pool = await createPool('10.111.5.0/29');
  const n = node();
  const stdin = nodeConf(fake, pool.metadata.name, n);
  for (const id of ['g1', 'g2', 'g3']) expect((await callPlugin('ADD', stdin, { containerId: id })).exitCode).toBe(0);
  const gcConf = netConf(ipamConf(fake, pool.metadata.name, n), '1.1.0', {
    'cni.dev/valid-attachments': [{ containerID: 'g2', ifname: 'eth0' }],
  });
  const out = await callPlugin('GC', gcConf, { containerId: '' });
  expect(out.stdout).toBe('');
  const left = await allocations(pool.metadata.name);
  expect(left.map((a) => a.spec.containerID)).toEqual(['g2']);
  expect(fake.aliasesOf(ZONE, n.instance)).toEqual([`${left[0]!.spec.ip}/32`]);
  const p = await kube().request<{ status: Record<string, number> }>('GET', `/apis/${API_VERSION}/ippools/${pool.metadata.name}`);
  expect(p.status).toMatchObject({ capacity: 5, allocated: 1, available: 4 });
});

test('GC of one network leaves the attachments of another network sharing the stateDir alone', async () => {
  const [poolP, poolQ] = [await createPool('10.111.7.0/29'), await createPool('10.111.8.0/29')];
  const n = node();
  const confA = netConf(ipamConf(fake, poolP.metadata.name, n), '1.1.0', { name: 'net-a' });
  const confB = netConf(ipamConf(fake, poolQ.metadata.name, n), '1.1.0', { name: 'net-b' });
  for (const id of ['a1', 'a2']) expect((await callPlugin('ADD', confA, { containerId: id })).exitCode).toBe(0);
  for (const id of ['b1', 'b2']) expect((await callPlugin('ADD', confB, { containerId: id })).exitCode).toBe(0);
  const aliasesOfA = (await allocations(poolP.metadata.name)).map((a) => `${a.spec.ip}/32`);

  // Network B's GC lists B's live attachments only: b2 is stale, A's are not B's to judge.
  const gcB = netConf(ipamConf(fake, poolQ.metadata.name, n), '1.1.0', {
    name: 'net-b',
    'cni.dev/valid-attachments': [{ containerID: 'b1', ifname: 'eth0' }],
  });
  expect((await callPlugin('GC', gcB, { containerId: '' })).stdout).toBe('');
  expect((await allocations(poolQ.metadata.name)).map((a) => a.spec.containerID)).toEqual(['b1']);
  expect((await allocations(poolP.metadata.name)).map((a) => a.spec.containerID).sort()).toEqual(['a1', 'a2']);
  expect(fake.aliasesOf(ZONE, n.instance)).toEqual(expect.arrayContaining(aliasesOfA));
  for (const id of ['a1', 'a2']) expect((await callPlugin('CHECK', confA, { containerId: id })).exitCode).toBe(0);
});

test('a /29 pool hands out its 5 addresses, then ADD fails with code 110; STATUS reports 50 when the pool is gone', async () => {
  const pool = await createPool('10.111.6.0/29');
  const n = node();
  const stdin = nodeConf(fake, pool.metadata.name, n);
  const outs = await Promise.all(['e1', 'e2', 'e3', 'e4', 'e5'].map((id) => callPlugin('ADD', stdin, { containerId: id })));
  const ips = outs.map((o) => parseOut(o).ips![0]!.address.split('/')[0]);
  expect(new Set(ips).size).toBe(5);
  expect(ips).not.toContain('10.111.6.0');
  expect(ips).not.toContain('10.111.6.1');
  expect(ips).not.toContain('10.111.6.7');
  const full = parseOut(await callPlugin('ADD', stdin, { containerId: 'e6' }));
  expect(full.code).toBe(110);
  expect((await callPlugin('STATUS', stdin, { containerId: '' })).exitCode).toBe(0);
  const missing = netConf(ipamConf(fake, 'no-such-pool', n));
  const st = parseOut(await callPlugin('STATUS', missing, { containerId: '' }));
  expect(st.code).toBe(50);
});

test('bad configuration is refused with code 7 naming the field', async () => {
  const n = node();
  for (const [field, value] of [
    ['pool', ''],
    ['zone', 'mars'],
    ['project', 'X'],
    ['batchWindowMs', -1],
    ['computeEndpoint', 'ftp://x'],
    ['bogus', 1],
  ] as const) {
    const r = parseOut(await callPlugin('ADD', netConf(ipamConf(fake, 'p', n, { [field]: value })), { containerId: 'cfg' }));
    expect(r.code).toBe(7);
    expect(r.msg).toContain(`ipam.${field}`);
  }
});

test('runtimes outside Kubernetes (podman: K8S_POD_NAME without a namespace) can ADD and DEL; logFile gets JSON lines', async () => {
  const pool = await createPool('10.111.7.0/24');
  const n = node();
  const logFile = `${n.stateDir}/gcp-ipam.log`;
  const stdin = netConf(ipamConf(fake, pool.metadata.name, n, { logFile }));
  const o = { containerId: 'podman-1', cniArgs: 'IgnoreUnknown=1;K8S_POD_NAME=happy_hugle' };
  expect((await callPlugin('ADD', stdin, o)).exitCode).toBe(0);
  expect((await allocations(pool.metadata.name))[0]!.spec).toMatchObject({ podName: '', podNamespace: '', containerID: 'podman-1' });
  const out = await callPlugin('DEL', stdin, o);
  expect(out.stdout).toBe('');
  expect(await allocations(pool.metadata.name)).toHaveLength(0);
  const lines = (await import('node:fs'))
    .readFileSync(logFile, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  expect(lines.map((l) => [l.command, l.msg])).toEqual([
    ['ADD', 'done'],
    ['DEL', 'done'],
  ]);
  expect(lines[0].containerId).toBe('podman-1');
});
