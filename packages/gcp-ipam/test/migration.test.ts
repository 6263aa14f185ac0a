// Pod IP live migration end to end (source pod on vm-src, destination on vm-dst, real API server, fake GCE),
// hostile and malformed annotations (refused before anything moves), and failures that must leave the IP with
// a consistent owner.
import { API_VERSION, ANN_IP, ANN_MOVE_OUT_IP, ANN_ORIGINAL_INSTANCE, allocationName, type IPAllocation, type IPPool } from '../src/types';
import {
  addNode,
  annotatePod,
  callPlugin,
  createPod,
  createPool,
  kube,
  newFake,
  nodeConf,
  parseOut,
  uniqueName,
  useCrds,
  ZONE,
  type NodeSetup,
} from './support';
import type { FakeGce } from '@cnikit/gce-emulator';
import { isNotFound } from '@cnikit/kube/lite';

let fake: FakeGce;
let src: NodeSetup;
let dst: NodeSetup;
let pool: IPPool;
let ns: string;

useCrds();
beforeEach(async () => {
  fake = await newFake({ opDurationMs: 100 });
  src = addNode(fake, uniqueName('vm-src'));
  dst = addNode(fake, uniqueName('vm-dst'));
  pool = await createPool('10.115.0.0/24');
  ns = uniqueName('mig');
});
afterEach(async () => {
  await fake.stop();
});

const conf = (n: NodeSetup): string => nodeConf(fake, pool.metadata.name, n);
const getAlloc = (ip: string): Promise<IPAllocation> =>
  kube().request<IPAllocation>('GET', `/apis/${API_VERSION}/ipallocations/${allocationName(pool.metadata.name, ip)}`);

/**
 * A host address of the pool with no IPAllocation, from the top down: the allocator draws IPs at random, so a
 * fixed "free" address is sometimes the very one this test's source pod just got.
 */
async function unallocatedIp(): Promise<string> {
  for (let host = 254; host > 1; host--) {
    const ip = `10.115.0.${host}`;
    try {
      await getAlloc(ip);
    } catch (err) {
      if (isNotFound(err)) return ip;
      throw err;
    }
  }
  throw new Error('every address of 10.115.0.0/24 is allocated');
}

/** A source pod with an IP on vm-src. */
async function source(owner = 'rs-uid-1'): Promise<{ name: string; ip: string; containerId: string }> {
  const name = uniqueName('app');
  await createPod(ns, name, { ownerUid: owner });
  const containerId = uniqueName('src');
  const out = await callPlugin('ADD', conf(src), { containerId, pod: { namespace: ns, name } });
  expect(out.stdout).not.toMatch(/"code"/);
  return { name, ip: parseOut(out).ips![0]!.address.split('/')[0]!, containerId };
}

test('migration end to end: the IP moves from vm-src to vm-dst, the source DEL keeps it, the destination DEL frees it', async () => {
  const s = await source();
  await annotatePod(ns, s.name, { [ANN_MOVE_OUT_IP]: s.ip });
  const dName = uniqueName('app');
  await createPod(ns, dName, { ownerUid: 'rs-uid-1', annotations: { [ANN_IP]: s.ip, [ANN_ORIGINAL_INSTANCE]: src.instance } });
  const dId = uniqueName('dst');
  const out = await callPlugin('ADD', conf(dst), { containerId: dId, pod: { namespace: ns, name: dName } });
  expect(out.stdout).not.toMatch(/"code"/);
  expect(parseOut(out).ips![0]!.address).toBe(`${s.ip}/24`);
  expect(fake.aliasesOf(ZONE, src.instance)).toEqual([]);
  expect(fake.aliasesOf(ZONE, dst.instance)).toEqual([`${s.ip}/32`]);
  const a = await getAlloc(s.ip);
  expect(a.spec).toMatchObject({ podName: dName, nodeName: dst.node, instance: dst.instance, containerID: dId, phase: 'Allocated' });
  expect(a.metadata.labels?.['ipam.gcp-cni.cast.ai/node']).toBe(dst.node); // GC and DEL of the new node find it
  // the source pod goes away: its DEL must not free or detach the IP now owned by the destination
  expect((await callPlugin('DEL', conf(src), { containerId: s.containerId, pod: { namespace: ns, name: s.name } })).exitCode).toBe(0);
  expect(fake.aliasesOf(ZONE, dst.instance)).toEqual([`${s.ip}/32`]);
  expect((await getAlloc(s.ip)).spec.containerID).toBe(dId);
  expect((await callPlugin('DEL', conf(dst), { containerId: dId })).exitCode).toBe(0);
  expect(fake.aliasesOf(ZONE, dst.instance)).toEqual([]);
  await expect(getAlloc(s.ip)).rejects.toThrow(/404/);
});

test('source deleted first (DEL sees move-out): the entry is kept, and the replacement can still claim it', async () => {
  const s = await source('rs-uid-2');
  await annotatePod(ns, s.name, { [ANN_MOVE_OUT_IP]: s.ip });
  expect((await callPlugin('DEL', conf(src), { containerId: s.containerId })).exitCode).toBe(0);
  expect((await getAlloc(s.ip)).spec.movingOut).toBe(true);
  expect(fake.aliasesOf(ZONE, src.instance)).toEqual([`${s.ip}/32`]);
  await kube().request('DELETE', `/api/v1/namespaces/${ns}/pods/${s.name}`);
  const dName = uniqueName('app');
  await createPod(ns, dName, { ownerUid: 'rs-uid-2', annotations: { [ANN_IP]: s.ip, [ANN_ORIGINAL_INSTANCE]: `${ZONE}/${src.instance}` } });
  const out = await callPlugin('ADD', conf(dst), { containerId: uniqueName('dst'), pod: { namespace: ns, name: dName } });
  expect(out.stdout).not.toMatch(/"code"/);
  expect(fake.aliasesOf(ZONE, dst.instance)).toEqual([`${s.ip}/32`]);
});

/** What a hostile or malformed claimant pod carries. */
interface Claim {
  ann: Record<string, string>;
  mark?: boolean;
  owner?: string;
  podName?: string;
  namespace?: string;
}

describe('hostile and malformed claims are refused (code 121) and change nothing', () => {
  const cases: [string, (s: { ip: string; name: string }) => Claim | Promise<Claim>, RegExp][] = [
    ['source not marked move-out', (s) => ({ ann: { [ANN_IP]: s.ip, [ANN_ORIGINAL_INSTANCE]: src.instance }, mark: false }), /not marked/],
    ['wrong original instance', (s) => ({ ann: { [ANN_IP]: s.ip, [ANN_ORIGINAL_INSTANCE]: 'some-other-vm' } }), /not attached to/],
    [
      'pod of another controller',
      (s) => ({ ann: { [ANN_IP]: s.ip, [ANN_ORIGINAL_INSTANCE]: src.instance }, owner: 'rs-evil' }),
      /does not replace/,
    ],
    [
      'pod in another namespace',
      (s) => ({ ann: { [ANN_IP]: s.ip, [ANN_ORIGINAL_INSTANCE]: src.instance }, namespace: uniqueName('evil') }),
      /another namespace/,
    ],
    [
      'IP not allocated',
      async () => ({ ann: { [ANN_IP]: await unallocatedIp(), [ANN_ORIGINAL_INSTANCE]: src.instance } }),
      /not allocated/,
    ],
    ['IP outside the pool', () => ({ ann: { [ANN_IP]: '10.0.0.2', [ANN_ORIGINAL_INSTANCE]: src.instance } }), /not a host address/],
    ['the gateway', () => ({ ann: { [ANN_IP]: '10.115.0.1', [ANN_ORIGINAL_INSTANCE]: src.instance } }), /not a host address/],
    ['a CIDR instead of an IP', (s) => ({ ann: { [ANN_IP]: `${s.ip}/0`, [ANN_ORIGINAL_INSTANCE]: src.instance } }), /not an IPv4 address/],
    ['garbage IP', () => ({ ann: { [ANN_IP]: '10.115.0.5; rm -rf /', [ANN_ORIGINAL_INSTANCE]: src.instance } }), /not an IPv4 address/],
    ['empty IP', () => ({ ann: { [ANN_IP]: '', [ANN_ORIGINAL_INSTANCE]: src.instance } }), /not an IPv4 address/],
    ['missing original instance', (s) => ({ ann: { [ANN_IP]: s.ip } }), /original-instance missing/],
    [
      'path traversal in the instance',
      (s) => ({ ann: { [ANN_IP]: s.ip, [ANN_ORIGINAL_INSTANCE]: '../../projects/x/zones/y/instances/z' } }),
      /original-instance missing or not/,
    ],
  ];
  for (const [title, make, expected] of cases) {
    test(title, async () => {
      const s = await source('rs-uid-3');
      const c = await make(s);
      if (c.mark !== false) await annotatePod(ns, s.name, { [ANN_MOVE_OUT_IP]: s.ip });
      const dNs = c.namespace ?? ns;
      const dName = uniqueName('claimant');
      await createPod(dNs, dName, { ownerUid: c.owner ?? 'rs-uid-3', annotations: c.ann });
      const r = parseOut(await callPlugin('ADD', conf(dst), { containerId: uniqueName('dst'), pod: { namespace: dNs, name: dName } }));
      expect(r.code).toBe(121);
      expect(r.msg).toMatch(expected);
      expect(fake.aliasesOf(ZONE, src.instance)).toEqual([`${s.ip}/32`]);
      expect(fake.aliasesOf(ZONE, dst.instance)).toEqual([]);
      const a = await getAlloc(s.ip);
      expect(a.spec).toMatchObject({ containerID: s.containerId, instance: src.instance, phase: 'Allocated' });
    });
  }
});

test('attach on the destination fails: the alias goes back to the source and the allocation to its source owner', async () => {
  const s = await source('rs-uid-4');
  await annotatePod(ns, s.name, { [ANN_MOVE_OUT_IP]: s.ip });
  const dName = uniqueName('app');
  await createPod(ns, dName, { ownerUid: 'rs-uid-4', annotations: { [ANN_IP]: s.ip, [ANN_ORIGINAL_INSTANCE]: src.instance } });
  // the detach succeeds, the attach cannot happen
  fake.instances.delete(`${ZONE}/${dst.instance}`); // the destination VM is unknown to the API: instances.get 404
  const r = parseOut(await callPlugin('ADD', conf(dst), { containerId: uniqueName('dst'), pod: { namespace: ns, name: dName } }));
  expect(r.code).toBe(120);
  expect(r.msg).toMatch(/returned to its source/);
  expect(fake.aliasesOf(ZONE, src.instance)).toEqual([`${s.ip}/32`]);
  const a = await getAlloc(s.ip);
  expect(a.spec).toMatchObject({ containerID: s.containerId, instance: src.instance, podName: s.name, phase: 'Allocated' });
  expect(a.spec.migration).toBeUndefined();
  expect(a.metadata.labels?.['ipam.gcp-cni.cast.ai/node']).toBe(src.node);
});

test('detach from the source fails: nothing moves', async () => {
  const s = await source('rs-uid-5');
  await annotatePod(ns, s.name, { [ANN_MOVE_OUT_IP]: s.ip });
  const dName = uniqueName('app');
  await createPod(ns, dName, { ownerUid: 'rs-uid-5', annotations: { [ANN_IP]: s.ip, [ANN_ORIGINAL_INSTANCE]: src.instance } });
  fake.inject('instances.updateNetworkInterface', { status: 400, reason: 'invalid', message: 'refused' }, 1);
  const r = parseOut(await callPlugin('ADD', conf(dst), { containerId: uniqueName('dst'), pod: { namespace: ns, name: dName } }));
  expect(r.code).toBe(120);
  expect(r.msg).toMatch(/detach from source failed/);
  expect(fake.aliasesOf(ZONE, src.instance)).toEqual([`${s.ip}/32`]);
  expect((await getAlloc(s.ip)).spec).toMatchObject({ containerID: s.containerId, phase: 'Allocated' });
});

test('two claimants race for one IP: exactly one wins', async () => {
  const s = await source('rs-uid-6');
  await annotatePod(ns, s.name, { [ANN_MOVE_OUT_IP]: s.ip });
  const names = [uniqueName('a'), uniqueName('b')];
  for (const n of names)
    await createPod(ns, n, { ownerUid: 'rs-uid-6', annotations: { [ANN_IP]: s.ip, [ANN_ORIGINAL_INSTANCE]: src.instance } });
  const outs = await Promise.all(
    names.map((n) => callPlugin('ADD', conf(dst), { containerId: `race-${n}`, pod: { namespace: ns, name: n } })),
  );
  const ok = outs.filter((o) => o.exitCode === 0);
  expect(ok).toHaveLength(1);
  expect([11, 121]).toContain(parseOut(outs.find((o) => o.exitCode !== 0)!).code);
  expect(fake.aliasesOf(ZONE, dst.instance)).toEqual([`${s.ip}/32`]);
});
