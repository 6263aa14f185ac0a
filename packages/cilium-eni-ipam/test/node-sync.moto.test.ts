// The operator's per-node work against moto_server (EC2 emulator) through the real @aws-sdk/client-ec2,
// with a fault-injecting proxy in front. moto quirks seen here: MACs malformed (normalised), Ipv4Prefix
// assignments answered empty (so prefix delegation falls back to /32s), terminated instances keep ENIs.
import { SdkEc2 } from '../src/ec2';
import { LimitsTable } from '../src/limits';
import { NodeSyncer, TAG_CLUSTER, newMemory, type NodeMemory } from '../src/node-sync';
import { TokenBucket } from '../src/rate-limit';
import type { CiliumNode } from '../src/types';
import {
  makeWorld,
  runInstances,
  startFaultProxy,
  startMoto,
  stopInstance,
  terminateInstance,
  type FaultProxy,
  type Moto,
  type World,
} from '@cnikit/cilium-eni-ipam-testing';

let moto: Moto;
let proxy: FaultProxy;
let w: World;
const CLUSTER = 'test-cluster';

beforeAll(async () => {
  moto = await startMoto();
  proxy = await startFaultProxy(moto.endpoint);
  w = await makeWorld(moto.endpoint);
}, 120_000);
afterAll(async () => {
  await proxy?.close();
  await moto?.stop();
});
beforeEach(() => {
  proxy.rules.length = 0;
  proxy.reset();
});

function ec2(): SdkEc2 {
  return new SdkEc2({ endpoint: proxy.endpoint, limiter: new TokenBucket(1000, 1000), retry: { attempts: 5, initialMs: 5, maxMs: 20 } });
}
function node(instanceId: string, over: Partial<CiliumNode['spec']> = {}, type = 'm5.large'): CiliumNode {
  return {
    metadata: { name: `n-${instanceId}` },
    spec: {
      'instance-id': instanceId,
      ...over,
      eni: { 'instance-type': type, 'vpc-id': w.vpcId, 'availability-zone': w.az, ...(over.eni ?? {}) },
      ipam: { ...(over.ipam ?? {}) },
    },
  };
}
const syncer = (api = ec2(), o: Partial<ConstructorParameters<typeof NodeSyncer>[1]> = {}) =>
  new NodeSyncer(api, { clusterName: CLUSTER, limits: new LimitsTable(), ...o });

test('default allocation: pre-allocate 8 on eth0, ENI view with MAC, subnet, VPC CIDRs', async () => {
  const [i] = await runInstances(w, 1);
  const api = ec2();
  const r = await syncer(api).sync(node(i), newMemory());
  expect(r.error).toBeUndefined();
  expect(Object.keys(r.pool)).toHaveLength(8);
  const eth0 = Object.values(r.enis).find((e) => e.number === 0)!;
  expect(eth0.mac).toMatch(/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/);
  expect(eth0.subnet).toEqual({ id: w.nodeSubnetId, cidr: '10.0.0.0/18' });
  expect(eth0.vpc.cidrs).toContain('10.0.0.0/16');
  for (const v of Object.values(r.pool)) expect(v.resource).toBe(eth0.id);
  expect(api.stats.calls).toMatchObject({ DescribeNetworkInterfaces: 1, AssignPrivateIpAddresses: 1 });
  expect(api.stats.calls.CreateNetworkInterface).toBeUndefined();
});

test('min-allocate 20 on m5.large: eth0 filled (9), one new ENI tagged with the cluster, delete-on-termination', async () => {
  const [i] = await runInstances(w, 1);
  const api = ec2();
  const r = await syncer(api).sync(node(i, { ipam: { 'min-allocate': 20 }, eni: { 'subnet-tags': { pods: 'a' } } }), newMemory());
  expect(r.error).toBeUndefined();
  expect(Object.keys(r.pool).length).toBeGreaterThanOrEqual(20);
  const created = Object.values(r.enis).filter((e) => e.number > 0);
  expect(created.length).toBe(2);
  for (const e of created) {
    expect(e.tags?.[TAG_CLUSTER]).toBe(CLUSTER);
    expect(e.subnet.id).toBe(w.subnets['pods-a']);
  }
  expect(api.stats.calls.ModifyNetworkInterfaceAttribute).toBe(2);
});

test('security groups chosen by tags', async () => {
  const [i] = await runInstances(w, 1);
  const r = await syncer().sync(node(i, { ipam: { 'min-allocate': 12 }, eni: { 'security-group-tags': { role: 'pods' } } }), newMemory());
  const created = Object.values(r.enis).filter((e) => e.number > 0);
  expect(created).toHaveLength(1);
  expect(created[0]['security-groups']).toContain(w.taggedSecurityGroupId);
});

test('prefix delegation: asks for /28s, falls back to /32 when EC2 answers InsufficientCidrBlocks', async () => {
  const [i] = await runInstances(w, 1);
  proxy.rules.push({ action: 'AssignPrivateIpAddresses', whenParam: 'Ipv4PrefixCount', code: 'InsufficientCidrBlocks' });
  const r = await syncer().sync(node(i, { eni: { 'use-prefix-delegation': true } }), newMemory());
  expect(r.error).toBeUndefined();
  expect(proxy.injected.InsufficientCidrBlocks).toBe(1);
  expect(r.actions.join('\n')).toMatch(/falling back to \/32/);
  expect(Object.keys(r.pool)).toHaveLength(8);
});

test('surge: 30 pending pods on a fresh node get addresses in one sync', async () => {
  const [i] = await runInstances(w, 1, 'm5.2xlarge');
  const r = await syncer().sync(node(i, {}, 'm5.2xlarge'), newMemory(), 30);
  expect(r.error).toBeUndefined();
  expect(Object.keys(r.pool).length).toBeGreaterThanOrEqual(38);
});

test('no endless ENI creation: at capacity, repeated syncs create nothing and report it', async () => {
  const [i] = await runInstances(w, 1);
  const api = ec2();
  const s = syncer(api);
  const mem = newMemory();
  const n = node(i, { ipam: { 'pre-allocate': 100 } });
  let r = await s.sync(n, mem);
  expect(Object.keys(r.pool)).toHaveLength(27);
  const creates = api.stats.calls.CreateNetworkInterface;
  expect(creates).toBe(2);
  for (let k = 0; k < 3; k++) r = await s.sync(n, mem);
  expect(api.stats.calls.CreateNetworkInterface).toBe(creates);
  expect(r.error).toMatch(/capacity/);
});

test('a subnet without free addresses: error, no ENI created', async () => {
  const [i] = await runInstances(w, 1);
  const api = ec2();
  // Fill eth0 so that a new ENI is needed, in a subnet that cannot take one.
  const r = await syncer(api).sync(node(i, { ipam: { 'min-allocate': 20 }, eni: { 'subnet-ids': ['subnet-doesnotexist'] } }), newMemory());
  expect(r.error).toMatch(/no subnet/);
  expect(api.stats.calls.CreateNetworkInterface).toBeUndefined();
});

test('throttling: RequestLimitExceeded (503, EC2 XML) is retried and the sync completes', async () => {
  const [i] = await runInstances(w, 1);
  proxy.rules.push({ action: '*', code: 'RequestLimitExceeded', times: 3 });
  const api = ec2();
  const r = await syncer(api).sync(node(i), newMemory());
  expect(r.error).toBeUndefined();
  expect(api.stats.throttled).toBe(3);
  expect(Object.keys(r.pool)).toHaveLength(8);
});

test('failures: an attach that fails rolls the new ENI back (no dangling ENI) and reports the error', async () => {
  const [i] = await runInstances(w, 1);
  proxy.rules.push({ action: 'AttachNetworkInterface', code: 'UnauthorizedOperation', status: 403 });
  const api = ec2();
  const r = await syncer(api).sync(node(i, { ipam: { 'min-allocate': 12 } }), newMemory());
  expect(r.error).toMatch(/AttachNetworkInterface: UnauthorizedOperation/);
  expect(api.stats.calls.DeleteNetworkInterface).toBe(1);
  const dangling = await api.describeNetworkInterfaces({ tags: { [TAG_CLUSTER]: CLUSTER }, status: 'available' });
  expect(dangling.filter((e) => e.description?.includes(i))).toHaveLength(0);
  expect(proxy.calls.DeleteNetworkInterface).toBe(1);
});

test('failures: a roll-back delete that fails too is reported with the ENI id, and the attach error stays the sync error', async () => {
  const [i] = await runInstances(w, 1);
  proxy.rules.push({ action: 'AttachNetworkInterface', code: 'UnauthorizedOperation', status: 403 });
  proxy.rules.push({ action: 'DeleteNetworkInterface', code: 'UnauthorizedOperation', status: 403 });
  const reported: { operation: string; id: string; err: unknown }[] = [];
  const r = await syncer(ec2(), { onCleanupError: (operation, id, err) => reported.push({ operation, id, err }) }).sync(
    node(i, { ipam: { 'min-allocate': 12 } }),
    newMemory(),
  );
  expect(r.error).toMatch(/AttachNetworkInterface: UnauthorizedOperation/);
  expect(reported).toHaveLength(1);
  expect(reported[0]).toMatchObject({ operation: 'DeleteNetworkInterface', id: expect.stringMatching(/^eni-/) });
  expect(String(reported[0]!.err)).toMatch(/UnauthorizedOperation/);
});

test('EC2 unreachable: the sync ends with the error instead of throwing, and changes nothing', async () => {
  const [i] = await runInstances(w, 1);
  proxy.rules.push({ action: '*', code: 'Unavailable', status: 503 });
  const r = await syncer().sync(node(i), newMemory());
  expect(r.error).toMatch(/^EC2: .*Unavailable/);
  expect(r.actions).toEqual([]);
});

test('latency: 50 ms per call still completes', async () => {
  const [i] = await runInstances(w, 1);
  proxy.rules.push({ action: '*', latencyMs: 50 });
  const t0 = Date.now();
  const r = await syncer().sync(node(i), newMemory());
  expect(r.error).toBeUndefined();
  expect(Date.now() - t0).toBeGreaterThanOrEqual(100);
});

test('release handshake, operator side: mark after the delay, unassign only after ready-for-release, abort on do-not-release', async () => {
  const [i] = await runInstances(w, 1);
  let t = 1_000_000;
  const api = ec2();
  const s = syncer(api, { releaseExcess: true, excessDelayMs: 180_000, now: () => t });
  const mem: NodeMemory = newMemory();
  const n = node(i, { ipam: { 'pre-allocate': 12 } });
  let r = await s.sync(n, mem);
  expect(Object.keys(r.pool)).toHaveLength(12);
  // Pre-allocate drops to 8: 4 in excess, but not marked before 180 s.
  n.spec.ipam = { 'pre-allocate': 8, pool: r.pool };
  r = await s.sync(n, mem);
  expect(r.releaseIps).toEqual({});
  expect(r.again).toBe(true);
  t += 181_000;
  r = await s.sync(n, mem);
  const marked = Object.keys(r.releaseIps);
  expect(marked).toHaveLength(4);
  expect(Object.values(r.releaseIps).every((v) => v === 'marked-for-release')).toBe(true);
  // Agent: three ready, one do-not-release.
  n.status = {
    ipam: {
      'release-ips': {
        [marked[0]]: 'ready-for-release',
        [marked[1]]: 'ready-for-release',
        [marked[2]]: 'ready-for-release',
        [marked[3]]: 'do-not-release',
      },
    },
  };
  r = await s.sync(n, mem);
  // One UnassignPrivateIpAddresses per ENI holding ready IPs.
  expect(api.stats.calls.UnassignPrivateIpAddresses).toBe(new Set(marked.slice(0, 3).map((a) => n.spec.ipam!.pool![a].resource)).size);
  expect(r.releaseIps).toEqual({ [marked[0]]: 'released', [marked[1]]: 'released', [marked[2]]: 'released' });
  expect(Object.keys(r.pool)).toHaveLength(9);
  for (const a of marked.slice(0, 3)) expect(r.pool[a]).toBeUndefined();
  // EC2 agrees.
  const eth0 = (await api.describeNetworkInterfaces({ instanceId: i }))[0];
  for (const a of marked.slice(0, 3)) expect(eth0.addresses).not.toContain(a);
});

test('release aborted when the node needs the IPs again', async () => {
  const [i] = await runInstances(w, 1);
  let t = 0;
  const s = syncer(ec2(), { releaseExcess: true, excessDelayMs: 1000, now: () => t });
  const mem = newMemory();
  const n = node(i, { ipam: { 'pre-allocate': 12 } });
  let r = await s.sync(n, mem);
  n.spec.ipam = { 'pre-allocate': 8, pool: r.pool };
  await s.sync(n, mem);
  t += 2000;
  r = await s.sync(n, mem);
  expect(Object.keys(r.releaseIps)).toHaveLength(4);
  // Pods arrive: 6 used -> no excess; marks not yet answered are dropped.
  n.status = {
    ipam: {
      used: Object.fromEntries(
        Object.keys(r.pool)
          .filter((a) => !(a in r.releaseIps))
          .slice(0, 6)
          .map((a) => [a, { owner: 'p' }]),
      ),
      'release-ips': r.releaseIps,
    },
  };
  r = await s.sync(n, mem);
  expect(r.releaseIps).toEqual({});
});

test('stopped instance keeps its pool; a terminated instance with no ENIs empties it with an error', async () => {
  const [i, j] = await runInstances(w, 2);
  const s = syncer();
  let r = await s.sync(node(i), newMemory());
  expect(Object.keys(r.pool)).toHaveLength(8);
  await stopInstance(w, i);
  r = await s.sync(node(i), newMemory());
  expect(r.error).toBeUndefined();
  expect(Object.keys(r.pool)).toHaveLength(8);
  // An instance that is gone: moto keeps ENIs of terminated instances attached, so use one that never existed
  // and one that was terminated (its pool must not grow).
  r = await s.sync(node('i-0123456789abcdef0'), newMemory());
  expect(r.error).toMatch(/gone|terminated/);
  expect(r.pool).toEqual({});
  await terminateInstance(w, j);
  const api = ec2();
  // moto keeps a terminated instance's ENIs attached (EC2 detaches them): only no new ENI is asserted.
  await syncer(api).sync(node(j), newMemory());
  expect(api.stats.calls.CreateNetworkInterface).toBeUndefined();
});
