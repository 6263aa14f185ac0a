/**
 * coild's egress NAT client side against the real kube-apiserver, with the pod network in real network
 * namespaces and a recording NAT client (the host kernel has no FoU; the datapath is tested in the kernel
 * lab): ADD of an annotated pod, live updates when the Egress changes, failures that leave nothing behind,
 * metrics, and a coild restart finding the running pod's netns from its host veth.
 */
import * as fs from 'node:fs';
import { Namespaces, Pods, ResourceClient, type KubeTransport } from '@cnikit/kube';
import { link } from '@cnikit/netlib';
import { Registry } from '@cnikit/kube/prom';
import { Egresses, Services, type Egress } from '../src/api/egress';
import { ANNOTATION_POOL } from '../src/api/types';
import { Coild } from '../src/coild/coild';
import type { NatClient, NatClientConfig } from '../src/coild/egress';
import { CoildServer } from '../src/coild/server';
import { IpamController } from '../src/controller/ipam-controller';
import { EgressController } from '../src/egress-controller/egress-controller';
import { clients, eventually, installCoilCrds, transport, uname } from './support';
import { cleanupAll, cni, dir, makeLan, makeNode, makePod, type Pod, type TestNode } from './topology';

jest.setTimeout(90_000);

interface Call {
  op: 'reconcile' | 'remove';
  netns: string;
  cfg?: NatClientConfig;
}

/** Records every call; `fail` makes the next reconcile throw after "programming" nothing. */
class RecordingNatClient implements NatClient {
  calls: Call[] = [];
  fail = false;
  async reconcileNatClient(netns: string, cfg: NatClientConfig): Promise<void> {
    this.calls.push({ op: 'reconcile', netns, cfg: JSON.parse(JSON.stringify(cfg)) as NatClientConfig });
    if (this.fail) {
      this.fail = false;
      throw new Error('fou: add link fou4_0a000001: EOPNOTSUPP');
    }
  }
  async removeNatClient(netns: string): Promise<void> {
    this.calls.push({ op: 'remove', netns });
  }
  async readNatClient(): Promise<{ peers: [] }> {
    return { peers: [] };
  }
  reconcilesOf(netns: string): NatClientConfig[] {
    return this.calls.filter((c) => c.op === 'reconcile' && sameNs(c.netns, netns)).map((c) => c.cfg!);
  }
}

const sameNs = (a: string, b: string): boolean => {
  try {
    const x = fs.statSync(a),
      y = fs.statSync(b);
    return x.dev === y.dev && x.ino === y.ino;
  } catch {
    return false;
  }
};

let t: KubeTransport;
let ipamCtl: IpamController;
let egressCtl: EgressController;
let node: TestNode;
let nat: RecordingNatClient;
const egNs = uname('egns');
const clientNs = uname('egcli');
const pool = uname('egpool');
let egresses: ResourceClient<Egress>;
let pods: ResourceClient<import('@cnikit/kube').Pod>;

async function startNode(n: Awaited<ReturnType<typeof makeNode>>, natClient: NatClient, socket?: string): Promise<TestNode> {
  const registry = new Registry();
  const coild = new Coild({
    transport: t,
    nodeName: n.name,
    hostNs: n.ns,
    gcIntervalMs: 3_600_000,
    egress: { fouPort: 5555, natClient },
    registry,
  });
  await coild.start();
  const sock = socket ?? `${dir}/${n.name}-eg.sock`;
  const server = new CoildServer(coild, { socketPath: sock, registry });
  await server.listen();
  return { ...n, socket: sock, coild, server, registry };
}

async function stopNode(n: TestNode): Promise<void> {
  await n.server.close();
  await n.coild.stop();
}

beforeAll(async () => {
  t = transport();
  await installCoilCrds(t);
  const c = clients(t);
  ipamCtl = new IpamController({ transport: t, registry: new Registry() });
  await ipamCtl.start();
  egressCtl = new EgressController({ transport: t, image: 'cnikit/coil:test' });
  await egressCtl.start();
  await c.pools.create({
    metadata: { name: pool },
    spec: { blockSizeBits: 2, subnets: [{ ipv4: '10.123.0.0/24', ipv6: 'fd00:123::/120' }] },
  });
  const nss = new ResourceClient(t, Namespaces);
  await nss.create({ metadata: { name: egNs } });
  await nss.create({ metadata: { name: clientNs, annotations: { [ANNOTATION_POOL]: pool } } });
  egresses = new ResourceClient(t, Egresses, { namespace: egNs });
  pods = new ResourceClient(t, Pods, { namespace: clientNs });
  await egresses.create({ metadata: { name: 'internet', namespace: egNs }, spec: { destinations: ['0.0.0.0/0', '2001:db8::/32'] } });
  await egresses.create({
    metadata: { name: 'other', namespace: egNs },
    spec: { destinations: ['192.0.2.0/24'], fouSourcePortAuto: true },
  });
  const svcs = new ResourceClient(t, Services, { namespace: egNs });
  await eventually(
    'services with ClusterIPs',
    async () => (await svcs.find('internet'))?.spec.clusterIP && (await svcs.find('other'))?.spec.clusterIP,
  );
  nat = new RecordingNatClient();
  node = await startNode(await makeNode(t, makeLan(), 7), nat);
});

afterAll(async () => {
  if (node) await stopNode(node).catch(() => undefined);
  await egressCtl?.stop();
  await ipamCtl?.stop();
  await cleanupAll();
});

async function podObject(p: Pod, annotations?: Record<string, string>): Promise<void> {
  await pods.create({
    metadata: { name: p.nsName, namespace: clientNs, annotations },
    spec: { nodeName: node.name, containers: [{ name: 'c', image: 'busybox' }] },
  });
}

const ipOf = (out: Record<string, unknown> | undefined, fam: 4 | 6): string | undefined =>
  (out?.['ips'] as { address: string }[] | undefined)?.map((i) => i.address.split('/')[0]!).find((a) => a.includes(':') === (fam === 6));

function usedAddresses(): number {
  return node.coild.ipam.ownedIn(pool).reduce((n, b) => n + b.alloc.count, 0);
}

async function clusterIP(name: string): Promise<string> {
  return (await new ResourceClient(t, Services, { namespace: egNs }).get(name)).spec.clusterIP!;
}

describe('coild --enable-egress', () => {
  let running: Pod;

  it("ADD of an annotated pod programs the NAT client with the Egresses' peers and destinations; metrics", async () => {
    running = makePod();
    await podObject(running, { [`egress.coil.cybozu.com/${egNs}`]: 'other,internet' });
    const r = await cni(node, running, { command: 'ADD', namespace: clientNs });
    expect(r.code).toBe(0);
    const v4 = ipOf(r.out, 4)!,
      v6 = ipOf(r.out, 6)!;
    expect(v4).toMatch(/^10\.123\./);
    const cfgs = nat.reconcilesOf(running.path);
    expect(cfgs).toHaveLength(1);
    expect(nat.calls.at(-1)!.netns).toBe(running.path);
    // The test API server has an IPv4 service range only: no IPv6 peer, so the IPv6 destination is left out.
    expect(cfgs[0]).toEqual({
      fouPort: 5555,
      podIPv4: v4,
      podIPv6: v6,
      egresses: [
        { namespace: egNs, name: 'internet', peerIPv4: await clusterIP('internet'), destinations: ['0.0.0.0/0'], fouSourcePortAuto: false },
        { namespace: egNs, name: 'other', peerIPv4: await clusterIP('other'), destinations: ['192.0.2.0/24'], fouSourcePortAuto: true },
      ],
    });
    const text = await node.registry.metrics();
    expect(text).toContain(`coil_egress_client_pod_count{namespace="${egNs}",egress="internet"} 1`);
    expect(text).toContain(
      `coil_egress_client_pod_info{namespace="${clientNs}",pod="${running.nsName}",interface="eth0",egress="other",egress_namespace="${egNs}"} 1`,
    );
  });

  it('editing the Egress re-runs the NAT client for the running pod', async () => {
    const before = nat.reconcilesOf(running.path).length;
    await egresses.patch('internet', { spec: { destinations: ['198.51.100.0/24', '203.0.113.0/24'] } });
    const cfg = await eventually('reconciled with new destinations', () =>
      nat
        .reconcilesOf(running.path)
        .slice(before)
        .find((c) => c.egresses.find((e) => e.name === 'internet')?.destinations.join() === '198.51.100.0/24,203.0.113.0/24'),
    );
    expect(cfg.egresses.find((e) => e.name === 'other')?.destinations).toEqual(['192.0.2.0/24']);
    await egresses.patch('internet', { spec: { fouSourcePortAuto: true } });
    await eventually(
      'reconciled with sport auto',
      () =>
        nat
          .reconcilesOf(running.path)
          .at(-1)
          ?.egresses.find((e) => e.name === 'internet')?.fouSourcePortAuto,
    );
    // Changes that do not concern the client (replicas) do not touch the pod.
    const n = nat.calls.length;
    await egresses.scale('internet', 2);
    await new Promise((r) => setTimeout(r, 500));
    expect(nat.calls.length).toBe(n);
  });

  it('a re-created Service (new ClusterIP) moves the tunnel; a deleted Egress leaves the pod alone until it returns', async () => {
    const svcs = new ResourceClient(t, Services, { namespace: egNs });
    const old = await clusterIP('other');
    await svcs.delete('other');
    // coil-egress-controller re-creates it; the API server hands out another address.
    const fresh = await eventually('service re-created', async () => (await svcs.find('other'))?.spec.clusterIP);
    if (fresh !== old) {
      await eventually(
        'tunnel to the new ClusterIP',
        () =>
          nat
            .reconcilesOf(running.path)
            .at(-1)
            ?.egresses.find((e) => e.name === 'other')?.peerIPv4 === fresh,
      );
    }
    const saved = await egresses.get('other');
    await egresses.delete('other');
    await eventually('service of the deleted egress gone', async () => !(await svcs.find('other')), 60_000);
    const n = nat.calls.length;
    await egresses.patch('internet', { spec: { destinations: ['198.51.100.0/24'] } });
    await new Promise((r) => setTimeout(r, 700));
    expect(nat.calls.length).toBe(n); // not reconciled with one Egress missing, and no retry loop
    await egresses.create({ metadata: { name: 'other', namespace: egNs }, spec: saved.spec });
    await eventually(
      'converged once the egress is back',
      () => {
        const last = nat.reconcilesOf(running.path).at(-1);
        return (
          nat.calls.length > n &&
          last?.egresses.map((e) => e.name).join() === 'internet,other' &&
          last.egresses[0]!.destinations.join() === '198.51.100.0/24'
        );
      },
      30_000,
    );
  });

  it("ADD reads the Pod from the node's cache when it holds that very pod (K8S_POD_UID)", async () => {
    const p = makePod();
    await podObject(p, { [`egress.coil.cybozu.com/${egNs}`]: 'internet' });
    const created = await pods.get(p.nsName);
    await eventually('pod cached', () => node.coild.egress!.podInformer.store.get(`${clientNs}/${p.nsName}`));
    const gets = jest.spyOn(ResourceClient.prototype, 'get');
    try {
      const planned = await node.coild.egress!.plan(clientNs, p.nsName, created.metadata.uid);
      expect(planned?.map((e) => e.name)).toEqual(['internet']);
      expect(gets.mock.contexts.filter((c) => (c as ResourceClient<never>).resource.kind === 'Pod')).toHaveLength(0);
      // Another UID (the pod was re-created): asked from the API.
      await node.coild.egress!.plan(clientNs, p.nsName, 'some-other-uid');
      expect(gets.mock.contexts.filter((c) => (c as ResourceClient<never>).resource.kind === 'Pod')).toHaveLength(1);
    } finally {
      gets.mockRestore();
    }
  });

  it('a pod without the annotation: the NAT client is not called', async () => {
    const p = makePod();
    await podObject(p, { unrelated: 'x' });
    const n = nat.calls.length;
    const r = await cni(node, p, { command: 'ADD', namespace: clientNs });
    expect(r.code).toBe(0);
    expect(nat.calls.length).toBe(n);
    expect((await cni(node, p, { command: 'DEL', namespace: clientNs })).code).toBe(0);
  });

  it('an unknown Egress, a malformed annotation or a failing NAT client fail the ADD and leave nothing', async () => {
    const cases: [string, Record<string, string>, number, boolean][] = [
      ['unknown egress', { [`egress.coil.cybozu.com/${egNs}`]: 'internet,nosuch' }, 7, false],
      ['egress in a namespace without it', { [`egress.coil.cybozu.com/${clientNs}`]: 'internet' }, 7, false],
      ['malformed name', { [`egress.coil.cybozu.com/${egNs}`]: 'Not_An/Egress' }, 7, false],
      ['NAT client failure', { [`egress.coil.cybozu.com/${egNs}`]: 'internet' }, 999, true],
    ];
    for (const [what, ann, code, failNat] of cases) {
      const p = makePod();
      await podObject(p, ann);
      const used = usedAddresses();
      nat.fail = failNat;
      const calls = nat.calls.length;
      const r = await cni(node, p, { command: 'ADD', namespace: clientNs });
      expect([what, r.code, r.out?.['code']]).toEqual([what, 1, code]);
      expect(r.out?.['msg']).toBeDefined();
      expect(usedAddresses()).toBe(used);
      expect((await link.list(node.ns)).some((l) => l.alias?.includes(p.containerId))).toBe(false);
      expect((await link.list(p.ns)).map((l) => l.name)).toEqual(['lo']);
      if (failNat) expect(nat.calls.slice(calls).map((c) => c.op)).toEqual(['reconcile', 'remove']);
      else expect(nat.calls.length).toBe(calls);
      expect(node.coild.egress!.list().some((c) => c.containerId === p.containerId)).toBe(false);
      expect((await cni(node, p, { command: 'DEL', namespace: clientNs })).code).toBe(0);
    }
    const missing = await cni(node, makePod(), { command: 'ADD', namespace: clientNs, podName: uname('ghost') });
    expect(missing.out).toMatchObject({ code: 11, msg: 'pod not found' });
  });

  it('after a coild restart the running pod is found (by address, netns by host veth) and kept up to date', async () => {
    const info = node.coild.pods().find((p) => p.containerId === running.containerId)!;
    await stopNode(node);
    // What kubelet does after ADD: the Pod's status carries its addresses.
    await pods.patchStatus(running.nsName, { status: { podIPs: [{ ip: info.ipv4 }, { ip: info.ipv6 }], podIP: info.ipv4 } });
    const nat2 = new RecordingNatClient();
    node = await startNode(node, nat2, node.socket);
    // Start-up converges every adopted pod: the netns is found without any file, only from the host veth.
    const first = await eventually('reconciled at start-up', () => nat2.calls.find((c) => c.op === 'reconcile'));
    expect(first.netns).not.toBe(running.path);
    expect(sameNs(first.netns, running.path)).toBe(true);
    expect(first.cfg!.podIPv4).toBe(info.ipv4);
    expect(node.coild.egress!.list().map((c) => [c.podNamespace, c.podName])).toEqual([[clientNs, running.nsName]]);
    await egresses.patch('other', { spec: { destinations: ['192.0.2.0/25'] } });
    await eventually('live update after restart', () =>
      nat2.reconcilesOf(running.path).some((c) => c.egresses.find((e) => e.name === 'other')?.destinations[0] === '192.0.2.0/25'),
    );
    expect(await node.registry.metrics()).toContain(`coil_egress_client_pod_count{namespace="${egNs}",egress="other"} 1`);

    // DEL: forgotten, metrics drop; a second DEL is fine.
    expect((await cni(node, running, { command: 'DEL', namespace: clientNs })).code).toBe(0);
    expect((await cni(node, running, { command: 'DEL', namespace: clientNs })).code).toBe(0);
    expect(node.coild.egress!.list()).toEqual([]);
    expect(await node.registry.metrics()).not.toContain('coil_egress_client_pod_count{');
    const n = nat2.calls.length;
    await egresses.patch('other', { spec: { destinations: ['192.0.2.0/24'] } });
    await new Promise((r) => setTimeout(r, 500));
    expect(nat2.calls.length).toBe(n);
  });
});
