// Operator + agent against a real kube-apiserver (packages/kube's globalSetup) and moto_server behind the
// fault proxy, through the real SDK: the anchor's scenarios end to end.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Leases, Namespaces, Pods, clientFor, installCrd, type KubeTransport, type LeaderRunner } from '@cnikit/kube';
import { eventually as poll, testCluster, transportFor, uniqueName } from '@cnikit/kube-testing';
import { Agent } from '../src/agent';
import { agentRequest, type AgentRequest } from '../src/agent-client';
import { ciliumNodeCrd } from '../src/crd';
import { SdkEc2 } from '../src/ec2';
import { LimitsTable } from '../src/limits';
import { TAG_CLUSTER } from '../src/node-sync';
import { Operator } from '../src/operator';
import { TokenBucket } from '../src/rate-limit';
import { CiliumNodes, type CiliumNode } from '../src/types';
import {
  makeWorld,
  runInstances,
  startFaultProxy,
  startMoto,
  type FaultProxy,
  type Moto,
  type World,
} from '@cnikit/cilium-eni-ipam-testing';

const CLUSTER = 'kube-test';
let moto: Moto;
let proxy: FaultProxy;
let w: World;
let transport: KubeTransport;
let operator: Operator;
let runner: LeaderRunner;
let ec2: SdkEc2;
let dir: string;
const agents: Agent[] = [];
const nodes = () => clientFor(transport, CiliumNodes);

/** The operator syncs on a timer: up to 20 s, every 100 ms. */
const eventually = <T>(what: string, fn: () => T | Promise<T>, timeoutMs = 20_000): Promise<NonNullable<T>> =>
  poll(what, fn, timeoutMs, 100);

async function startAgent(
  type = 'm5.large',
  over: Partial<ConstructorParameters<typeof Agent>[0]> = {},
): Promise<{ agent: Agent; name: string; instanceId: string }> {
  const [instanceId] = await runInstances(w, 1, type);
  const name = uniqueName('node');
  const agent = new Agent({
    transport,
    nodeName: name,
    socketPath: path.join(dir, `${name}.sock`),
    instance: { instanceId, instanceType: type, vpcId: w.vpcId, availabilityZone: w.az, nodeSubnetId: w.nodeSubnetId },
    ...over,
  });
  agents.push(agent);
  await agent.start();
  return { agent, name, instanceId };
}

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'eni-kube-'));
  moto = await startMoto();
  proxy = await startFaultProxy(moto.endpoint);
  w = await makeWorld(moto.endpoint);
  transport = transportFor(testCluster());
  await installCrd(transport, ciliumNodeCrd());
  ec2 = new SdkEc2({ endpoint: proxy.endpoint, limiter: new TokenBucket(200, 50), retry: { attempts: 6, initialMs: 10, maxMs: 100 } });
  const r = await Operator.runWithLeaderElection({
    transport,
    ec2,
    clusterName: CLUSTER,
    limits: new LimitsTable(),
    workers: 4,
    releaseExcess: true,
    excessDelayMs: 300,
    resyncMs: 2000,
    busyResyncMs: 200,
    gcIntervalMs: 0,
    namespace: 'default',
    identity: `op-${process.pid}`,
    leaseName: uniqueName('eni-op'),
    retryPeriodMs: 200,
    leaseDurationMs: 2000,
    renewDeadlineMs: 1500,
  });
  operator = r.operator;
  runner = r.runner;
  await eventually('leadership', () => runner.isLeader());
}, 120_000);

afterAll(async () => {
  for (const a of agents) await a.stop().catch(() => undefined);
  await runner?.stop();
  await proxy?.close();
  await moto?.stop();
  transport?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

test('agent creates its CiliumNode; operator fills the pool; the agent hands out IPs and publishes used; operator tops up', async () => {
  const { agent, name, instanceId } = await startAgent();
  const created = await nodes().get(name);
  expect(created.spec['instance-id']).toBe(instanceId);
  expect(created.spec.eni).toMatchObject({ 'instance-type': 'm5.large', 'vpc-id': w.vpcId, 'availability-zone': w.az });
  await agent.waitForPool(20_000);
  const sock = agent.socketPath;
  const leases = [];
  for (let k = 0; k < 5; k++) {
    const r = await agentRequest(sock, { op: 'add', owner: `c${k}/eth0` });
    if (!r.ok) throw new Error(r.msg);
    leases.push(r.lease!);
  }
  expect(new Set(leases.map((l) => l.ip)).size).toBe(5);
  expect(leases[0].eni.gateway).toBe('10.0.0.1');
  expect(leases[0].eni.vpcCidrs).toContain('10.0.0.0/16');
  const n = await eventually('used published and pool topped up', async () => {
    const x = await nodes().get(name);
    return Object.keys(x.status?.ipam?.used ?? {}).length === 5 && Object.keys(x.spec.ipam?.pool ?? {}).length >= 13 ? x : undefined;
  });
  expect(n.status?.ipam?.['operator-status']).toEqual({});
  expect(Object.keys(n.status?.eni?.enis ?? {}).length).toBeGreaterThanOrEqual(1);
  const metrics = await operator.metrics.registry.metrics();
  expect(metrics).toMatch(new RegExp(`cilium_operator_ipam_available_ips\\{node="${name}"\\} (1[3-9]|[2-9]\\d)`));
  expect(metrics).toMatch(/leader_election_master_status\{name="[^"]+"\} 1/);
});

test('agent: check answers the lease an owner holds; gc frees the owners not kept and publishes used', async () => {
  const { agent, name } = await startAgent();
  await agent.waitForPool(20_000);
  const sock = agent.socketPath;
  const a = await agentRequest(sock, { op: 'add', owner: 'keep/eth0' });
  const b = await agentRequest(sock, { op: 'add', owner: 'gone/eth0' });
  if (!a.ok || !b.ok) throw new Error('add failed');
  expect(await agentRequest(sock, { op: 'check', owner: 'keep/eth0' })).toMatchObject({ ok: true, lease: { ip: a.lease!.ip } });
  expect(((await agentRequest(sock, { op: 'check', owner: 'nobody/eth0' })) as { lease?: unknown }).lease).toBeUndefined();
  expect(await agentRequest(sock, { op: 'gc', owner: '' })).toMatchObject({ ok: false, code: 7 });
  expect(await agentRequest(sock, { op: 'gc', owner: '', keep: ['keep/eth0'] })).toEqual({ ok: true, released: [b.lease!.ip] });
  // the reply is sent after used is stored
  const used = (await nodes().get(name)).status?.ipam?.used ?? {};
  expect(Object.keys(used)).toEqual([a.lease!.ip]);
  expect(used[a.lease!.ip]).toMatchObject({ owner: 'keep/eth0' });
});

test('agent: leases answers every IP handed out with its owner and ENI, the book status.ipam.used publishes; it needs no owner and changes nothing', async () => {
  const { agent, name } = await startAgent();
  await agent.waitForPool(20_000);
  const sock = agent.socketPath;
  expect(await agentRequest(sock, { op: 'leases' } as AgentRequest)).toEqual({ ok: true, leases: [] });
  const a = await agentRequest(sock, { op: 'add', owner: 'c1/eth0' });
  const b = await agentRequest(sock, { op: 'add', owner: 'c2/net1' });
  if (!a.ok || !b.ok) throw new Error('add failed');
  const r = await agentRequest(sock, { op: 'leases', owner: '' });
  if (!r.ok) throw new Error(r.msg);
  expect([...r.leases!].sort((x, y) => x.owner.localeCompare(y.owner))).toEqual([
    { ip: a.lease!.ip, owner: 'c1/eth0', eni: a.lease!.eni.id },
    { ip: b.lease!.ip, owner: 'c2/net1', eni: b.lease!.eni.id },
  ]);
  // the book as published (the add replies were sent once used was stored); the agent answers by IP, the API
  // server's JSON has its keys in string order
  const used = (await nodes().get(name)).status?.ipam?.used ?? {};
  expect(Object.fromEntries(r.leases!.map((l) => [l.ip, { owner: l.owner, resource: l.eni }]))).toEqual(used);
  // read-only: asked again, the same answer, and both owners still hold their IPs
  expect(await agentRequest(sock, { op: 'leases', owner: '' })).toEqual(r);
  expect(await agentRequest(sock, { op: 'check', owner: 'c2/net1' })).toMatchObject({ ok: true, lease: { ip: b.lease!.ip } });
});

test('surge: 30 pending pods scheduled to a fresh node are covered in the first round (cilium#32713)', async () => {
  const ns = uniqueName('surge');
  await clientFor(transport, Namespaces).create({ metadata: { name: ns } });
  const pods = clientFor(transport, Pods, { namespace: ns });
  const [instanceId] = await runInstances(w, 1, 'm5.2xlarge');
  const name = uniqueName('node');
  for (let k = 0; k < 30; k++)
    await pods.create({ metadata: { name: `p${k}` }, spec: { nodeName: name, containers: [{ name: 'c', image: 'x' }] } });
  await eventually('pods in the operator cache', () => operator.pendingPods(name) === 30);
  await nodes().create({
    metadata: { name },
    spec: { 'instance-id': instanceId, eni: { 'instance-type': 'm5.2xlarge', 'vpc-id': w.vpcId, 'availability-zone': w.az }, ipam: {} },
  });
  const first = await eventually('pool >= 30 + 8', async () => {
    const p = Object.keys((await nodes().get(name)).spec.ipam?.pool ?? {});
    return p.length >= 38 ? p : undefined;
  });

  // The agent hands 20 of them out; kubelet has not reported those pods' IPs yet (still Pending). They are
  // in status.ipam.used now and must not count as pending as well: the pool holds, it does not grow by 20.
  await nodes().updateWithRetry(
    name,
    (cur) => {
      const used = Object.fromEntries(
        first.slice(0, 20).map((a, k) => [a, { owner: `sandbox${k}/eth0`, resource: cur.spec.ipam!.pool![a]!.resource }]),
      );
      cur.status = { ...cur.status, ipam: { ...cur.status?.ipam, used } };
      return cur;
    },
    { subresource: 'status' },
  );
  await eventually(
    'the operator cache sees 20 used',
    () => Object.keys(operator.informer.store.get(name)?.status?.ipam?.used ?? {}).length === 20,
  );
  const before = operator.last.get(name);
  expect(operator.pendingPods(name)).toBe(10);
  const after = await eventually('a sync after the agent wrote used', () =>
    operator.last.get(name) !== before ? operator.last.get(name) : undefined,
  );
  expect(after.plan.toAllocate).toBe(0);
  expect(Object.keys((await nodes().get(name)).spec.ipam?.pool ?? {}).length).toBe(first.length);
  await nodes().delete(name);
});

test('an EC2 outage shows in the CiliumNode status, the agent and the operator log, and clears when EC2 is back', async () => {
  const { agent, name } = await startAgent();
  await eventually('first pool', async () => Object.keys((await nodes().get(name)).spec.ipam?.pool ?? {}).length >= 8);
  const logged: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  const spy = jest.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array, ...rest: unknown[]) => {
    logged.push(String(chunk));
    return write(chunk as string, ...(rest as []));
  });
  proxy.rules.push({ action: '*', code: 'Unavailable', status: 503 });
  try {
    // Any change the operator reacts to makes it sync the node now.
    await nodes().updateWithRetry(name, (cur) => {
      cur.spec.ipam = { ...cur.spec.ipam, 'pre-allocate': 9 };
      return cur;
    });
    const st = await eventually('operator-status.error', async () => (await nodes().get(name)).status?.ipam?.['operator-status']?.error);
    expect(st).toMatch(/^EC2: .*Unavailable/);
    // the agent passes it on: STATUS and a pod's failed ADD name why the pool does not grow
    const said = await eventually('the agent knows the operator error', async () => {
      const r = agent.handle({ op: 'status', owner: '' });
      return r.ok && r.operatorError ? r.operatorError : undefined;
    });
    expect(said).toBe(st);
    await eventually('a warning in the operator log', () => logged.some((l) => l.includes('"node sync incomplete"') && l.includes(name)));
  } finally {
    proxy.rules.length = 0;
    spy.mockRestore();
  }
  await eventually('error cleared', async () => (await nodes().get(name)).status?.ipam?.['operator-status']?.error === undefined);
  await eventually('the agent no longer names it', () => {
    const r = agent.handle({ op: 'status', owner: '' });
    return r.ok && r.operatorError === undefined;
  });
});

test('release: excess IPs go through marked -> ready -> released; the agent never hands one out after unassign (cilium#13412)', async () => {
  const { agent, name, instanceId } = await startAgent('m5.large', { ipam: { 'pre-allocate': 14 } });
  const before = await eventually('pool of 14', async () => {
    const p = Object.keys((await nodes().get(name)).spec.ipam?.pool ?? {});
    return p.length >= 14 ? p : undefined;
  });
  await nodes().updateWithRetry(name, (cur) => {
    cur.spec.ipam = { ...cur.spec.ipam, 'pre-allocate': 8 };
    return cur;
  });
  const released = new Set<string>();
  // Every IP the pool held at some point (pods churning while the old pre-allocate is still cached can add one).
  const seen = new Set<string>(before);
  const handed: string[] = [];
  const n = await eventually(
    '6 IPs released and cleaned up',
    async () => {
      const x = await nodes().get(name);
      for (const a of Object.keys(x.spec.ipam?.pool ?? {})) seen.add(a);
      for (const [ipAddr, s] of Object.entries(x.status?.ipam?.['release-ips'] ?? {}))
        if (s === 'released' || s === 'ready-for-release') released.add(ipAddr);
      // Meanwhile pods come and go on the node.
      const r = await agentRequest(agent.socketPath, { op: 'add', owner: `churn${handed.length}/eth0` });
      if (r.ok) {
        handed.push(r.lease!.ip);
        await agentRequest(agent.socketPath, { op: 'del', owner: `churn${handed.length - 1}/eth0` });
      }
      // The churning pod holds one IP half of the time, so the watermark is 8 free + 0 or 1 used:
      // a pool of 9 is as right as 8 (waiting for 8 races the churn: the excess is then 0 every other read).
      const size = Object.keys(x.spec.ipam?.pool ?? {}).length;
      return size <= 9 && Object.keys(x.status?.ipam?.['release-ips'] ?? {}).length === 0 ? x : undefined;
    },
    30_000,
  );
  const onEc2 = (await ec2.describeNetworkInterfaces({ instanceId })).flatMap((e) => e.addresses);
  for (const a of Object.keys(n.spec.ipam!.pool!)) expect(onEc2).toContain(a);
  const gone = [...seen].filter((a) => !(a in n.spec.ipam!.pool!));
  expect(gone.length).toBeGreaterThanOrEqual(before.length - 9);
  // Every handshake state seen while polling was about an IP of the pool.
  for (const a of released) expect(seen.has(a)).toBe(true);
  for (const a of gone) expect(onEc2).not.toContain(a);
  // Handed out after release was settled: never a released IP.
  for (let k = 0; k < 8; k++) {
    const r = await agentRequest(agent.socketPath, { op: 'add', owner: `after${k}/eth0` });
    if (r.ok) expect(gone).not.toContain(r.lease!.ip);
  }
});

test('conflicts do not wedge a node: a third writer hammering the object while operator and agent write (cilium#35404)', async () => {
  const { agent, name } = await startAgent('m5.large', { ipam: { 'min-allocate': 12 } });
  let stop = false;
  let writes = 0;
  const hammer = (async () => {
    while (!stop) {
      await nodes()
        .updateWithRetry(name, (cur) => {
          cur.metadata.labels = { ...cur.metadata.labels, tick: String(++writes) };
          return cur;
        })
        .catch(() => undefined);
    }
  })();
  try {
    await agent.waitForPool(20_000);
    for (let k = 0; k < 6; k++) expect((await agentRequest(agent.socketPath, { op: 'add', owner: `w${k}/eth0` })).ok).toBe(true);
    await eventually('used 6 and pool >= 14', async () => {
      const x = await nodes().get(name);
      return Object.keys(x.status?.ipam?.used ?? {}).length === 6 && Object.keys(x.spec.ipam?.pool ?? {}).length >= 14;
    });
  } finally {
    stop = true;
    await hammer;
  }
  expect(writes).toBeGreaterThan(5);
});

test('throttling from EC2 slows the operator but every node converges', async () => {
  proxy.rules.push({ action: '*', code: 'RequestLimitExceeded', every: 3 });
  try {
    const { agent, name } = await startAgent('m5.large', { ipam: { 'min-allocate': 20 } });
    await agent.waitForPool(30_000);
    expect(Object.keys((await nodes().get(name)).spec.ipam?.pool ?? {}).length).toBeGreaterThanOrEqual(20);
    expect(proxy.injected.RequestLimitExceeded).toBeGreaterThan(0);
  } finally {
    proxy.rules.length = 0;
  }
});

test('node deletion: operator forgets the node and GC deletes dangling ENIs tagged with the cluster', async () => {
  const dangling = await ec2.createNetworkInterface({
    subnetId: w.subnets['pods-b'],
    securityGroups: [w.securityGroupId],
    description: 'left behind',
    tags: { [TAG_CLUSTER]: CLUSTER },
  });
  const other = await ec2.createNetworkInterface({
    subnetId: w.subnets['pods-b'],
    securityGroups: [w.securityGroupId],
    description: 'other cluster',
    tags: { [TAG_CLUSTER]: 'someone-else' },
  });
  const [instanceId] = await runInstances(w, 1);
  const name = uniqueName('node');
  const n: CiliumNode = {
    metadata: { name },
    spec: { 'instance-id': instanceId, eni: { 'instance-type': 'm5.large', 'vpc-id': w.vpcId, 'availability-zone': w.az }, ipam: {} },
  };
  await nodes().create(n);
  await eventually('pool', async () => Object.keys((await nodes().get(name)).spec.ipam?.pool ?? {}).length >= 8);
  await nodes().delete(name);
  await eventually(
    'dangling ENI deleted',
    async () => !(await ec2.describeNetworkInterfaces({ tags: { [TAG_CLUSTER]: CLUSTER } })).some((e) => e.id === dangling.id),
  );
  expect((await ec2.describeNetworkInterfaces({ tags: { [TAG_CLUSTER]: 'someone-else' } })).map((e) => e.id)).toContain(other.id);
  expect(operator.last.has(name)).toBe(false);
});

test('leader election: a second operator stands by, then takes over when the leader stops', async () => {
  const lease = await clientFor(transport, Leases, { namespace: 'default' }).list();
  const ours = lease.items.find((l) => l.spec?.holderIdentity === `op-${process.pid}`)!;
  expect(ours).toBeDefined();
  const second = await Operator.runWithLeaderElection({
    transport,
    ec2,
    clusterName: CLUSTER,
    limits: new LimitsTable(),
    workers: 2,
    gcIntervalMs: 0,
    resyncMs: 1000,
    namespace: 'default',
    identity: `standby-${process.pid}`,
    leaseName: ours.metadata.name,
    retryPeriodMs: 200,
    leaseDurationMs: 2000,
    renewDeadlineMs: 1500,
  });
  try {
    await new Promise((r) => setTimeout(r, 1000));
    expect(second.runner.isLeader()).toBe(false);
    expect(second.operator.last.size).toBe(0);
    await runner.stop(); // stops the operator, releases the lease
    await eventually('standby leads', () => second.runner.isLeader(), 15_000);
    await eventually('standby syncs nodes', () => second.operator.last.size > 0, 15_000);
  } finally {
    await second.runner.stop();
  }
});
