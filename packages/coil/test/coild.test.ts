/**
 * coild + coil on a two-node cluster in network namespaces, against the real kube-apiserver with the
 * controller running in-process. Real traffic between pods of different nodes; restart; block freeing;
 * pool deletion; bad input; metrics; every CNI version.
 */
import * as fs from 'node:fs';
import { Namespaces, ResourceClient, type KubeTransport } from '@cnikit/kube';
import { link, route, rule } from '@cnikit/netlib';
import { sh } from '@cnikit/netlib-testing';
import { Registry } from '@cnikit/kube/prom';
import { ANNOTATION_POOL, FINALIZER, LABEL_NODE, LABEL_POOL, type AddressPool } from '../src/api/types';
import { IpamController } from '../src/controller/ipam-controller';
import { clients, eventually, installCoilCrds, transport, uname } from './support';
import { cleanupAll, cni, importRoutes, makeLan, makeNode, makePod, startCoild, stopCoild, type Pod, type TestNode } from './topology';

jest.setTimeout(90_000);

let t: KubeTransport;
let c: ReturnType<typeof clients>;
let ctl: IpamController;
let n1: TestNode;
let n2: TestNode;
const nsDefault = uname('nsa');
const nsDual = uname('nsd');
const nsBad = uname('nsbad');
const nsUnknown = uname('nsunk');
const nsTiny = uname('nstiny');
const dualPool = uname('dual');
const tinyPool = uname('tiny');

beforeAll(async () => {
  t = transport();
  await installCoilCrds(t);
  c = clients(t);
  ctl = new IpamController({ transport: t, registry: new Registry() });
  await ctl.start();
  const pool = (name: string, spec: AddressPool['spec']): AddressPool => ({ metadata: { name }, spec });
  if (!(await c.pools.find('default'))) await c.pools.create(pool('default', { blockSizeBits: 3, subnets: [{ ipv4: '10.120.0.0/20' }] }));
  await c.pools.create(pool(dualPool, { blockSizeBits: 2, subnets: [{ ipv4: '10.121.0.0/24', ipv6: 'fd00:121::/120' }] }));
  await c.pools.create(pool(tinyPool, { blockSizeBits: 0, subnets: [{ ipv4: '10.122.0.0/31' }] }));
  const nss = new ResourceClient(t, Namespaces);
  await nss.create({ metadata: { name: nsDefault } });
  await nss.create({ metadata: { name: nsDual, annotations: { [ANNOTATION_POOL]: dualPool } } });
  await nss.create({ metadata: { name: nsBad, annotations: { [ANNOTATION_POOL]: 'Not_A/Pool' } } });
  await nss.create({ metadata: { name: nsUnknown, annotations: { [ANNOTATION_POOL]: uname('nosuch') } } });
  await nss.create({ metadata: { name: nsTiny, annotations: { [ANNOTATION_POOL]: tinyPool } } });
  const lan = makeLan();
  n1 = await startCoild(t, await makeNode(t, lan, 1));
  n2 = await startCoild(t, await makeNode(t, lan, 2));
});

afterAll(async () => {
  for (const n of [n1, n2]) if (n) await stopCoild(n).catch(() => undefined);
  await ctl?.stop();
  await cleanupAll();
});

const ipOf = (out: Record<string, unknown> | undefined, fam: 4 | 6): string | undefined =>
  (out?.['ips'] as { address: string }[] | undefined)?.map((i) => i.address.split('/')[0]!).find((a) => a.includes(':') === (fam === 6));

async function hostVeths(n: TestNode): Promise<number> {
  return (await link.list(n.ns)).filter((l) => l.alias?.startsWith('COIL:')).length;
}

async function blocksOf(n: TestNode): Promise<string[]> {
  return (await c.blocks.list({ labelSelector: `${LABEL_NODE}=${n.name}` })).items.map((b) => b.metadata.name!).sort();
}

describe('two nodes', () => {
  const pods: [Pod, TestNode, string][] = [];
  afterAll(async () => {
    for (const [p, n, ns] of pods) {
      await cni(n, p, { command: 'DEL', namespace: ns });
      p.cleanup();
    }
  });

  it('pods on different nodes talk (IPv4 and dual-stack) through imported table-119 routes', async () => {
    const a = makePod(),
      b = makePod(),
      da = makePod(),
      db = makePod();
    pods.push([a, n1, nsDefault], [b, n2, nsDefault], [da, n1, nsDual], [db, n2, nsDual]);
    const ra = await cni(n1, a, { command: 'ADD', namespace: nsDefault });
    expect(ra.code).toBe(0);
    const rb = await cni(n2, b, { command: 'ADD', namespace: nsDefault });
    expect(rb.code).toBe(0);
    const rda = await cni(n1, da, { command: 'ADD', namespace: nsDual });
    expect(rda.code).toBe(0);
    const rdb = await cni(n2, db, { command: 'ADD', namespace: nsDual });
    expect(rdb.code).toBe(0);
    const ipA = ipOf(ra.out, 4)!,
      ipB = ipOf(rb.out, 4)!;
    expect(ipA).toMatch(/^10\.120\./);
    expect(ipB).toMatch(/^10\.120\./);
    expect(ipOf(rda.out, 6)).toMatch(/^fd00:121::/);

    // Node side as the anchor: table 116 host routes proto 30, rule pref 2000, blocks exported to table 119.
    const t116 = await route.list(n1.ns, { table: 116 });
    expect(t116.find((r) => r.dst === `${ipA}/32`)).toMatchObject({ protocol: 30, scope: 253 });
    expect((await rule.list(n1.ns, 4)).some((r) => r.priority === 2000 && r.table === 116)).toBe(true);
    const t119 = (await route.list(n1.ns, { table: 119 })).filter((r) => r.protocol === 30).map((r) => r.dst);
    expect(t119.length).toBeGreaterThanOrEqual(2);
    const links = await link.list(n1.ns);
    expect(links.some((l) => l.alias === `COIL:default:${a.containerId}:eth0`)).toBe(true);
    const pr = sh(a.ns, 'ip -j route show');
    expect(pr).toContain(`"gateway":"${n1.ip}"`);

    await importRoutes(n1, n2);
    await importRoutes(n2, n1);
    sh(a.ns, `ping -c 2 -W 2 ${ipB}`);
    sh(b.ns, `ping -c 2 -W 2 ${ipA}`);
    sh(da.ns, `ping -c 2 -W 2 ${ipOf(rdb.out, 4)}`);
    sh(da.ns, `ping -6 -c 2 -W 2 ${ipOf(rdb.out, 6)}`);
    // Pod to node and node to pod.
    sh(a.ns, `ping -c 1 -W 2 ${n2.ip}`);
    sh(n2.ns, `ping -c 1 -W 2 ${ipA}`);

    // CHECK verifies addresses and routes.
    for (const [p, n, r, ns] of [
      [a, n1, ra, nsDefault],
      [db, n2, rdb, nsDual],
    ] as const) {
      expect((await cni(n, p, { command: 'CHECK', namespace: ns, extra: { prevResult: r.out } })).code).toBe(0);
    }
    sh(a.ns, 'ip route del default');
    const broken = await cni(n1, a, { command: 'CHECK', namespace: nsDefault, extra: { prevResult: ra.out } });
    expect(broken.code).toBe(1);
    expect(broken.out?.['msg']).toMatch(/default route/);
    sh(a.ns, `ip route add default via ${n1.ip} dev eth0`);
  });
});

describe('one node', () => {
  it('concurrent ADDs get distinct addresses from several blocks; DELs free every block (and DEL repeats)', async () => {
    const before = await blocksOf(n1);
    const pods = Array.from({ length: 30 }, () => makePod());
    const adds = await Promise.all(pods.map((p) => cni(n1, p, { command: 'ADD', namespace: nsDefault })));
    expect(adds.map((r) => r.code)).toEqual(pods.map(() => 0));
    const ips = adds.map((r) => ipOf(r.out, 4));
    expect(new Set(ips).size).toBe(30);
    const during = await blocksOf(n1);
    expect(during.length).toBeGreaterThanOrEqual(before.length + 3); // 8 addresses per block
    const exported = (await route.list(n1.ns, { table: 119 })).filter((r) => r.protocol === 30).length;
    expect(exported).toBe(during.length); // IPv4-only pool: one route per block
    // Mixed concurrent DELs and ADDs never hand out an address twice.
    const more = Array.from({ length: 10 }, () => makePod());
    const mixed = await Promise.all([
      ...pods.slice(0, 10).map((p) => cni(n1, p, { command: 'DEL', namespace: nsDefault })),
      ...more.map((p) => cni(n1, p, { command: 'ADD', namespace: nsDefault })),
    ]);
    expect(mixed.filter((r) => r.code !== 0).map((r) => r.out)).toEqual([]);
    const live = [...ips.slice(10), ...mixed.slice(10).map((r) => ipOf(r.out, 4))];
    expect(new Set(live).size).toBe(30);
    const all = [...pods, ...more];
    const dels = await Promise.all(all.map((p) => cni(n1, p, { command: 'DEL', namespace: nsDefault })));
    expect(dels.every((r) => r.code === 0)).toBe(true);
    const again = await cni(n1, pods[0], { command: 'DEL', namespace: nsDefault });
    expect(again.code).toBe(0);
    for (const p of all) p.cleanup();
    // Only the blocks the two-node test's pods still use remain.
    await eventually('blocks freed', async () => (await blocksOf(n1)).length === before.length);
    expect((await route.list(n1.ns, { table: 119 })).filter((r) => r.protocol === 30)).toHaveLength(before.length);
  });

  it('IPAM state survives a coild restart (rebuilt from the kernel), without leaking or duplicating blocks; unused blocks are freed', async () => {
    const p1 = makePod(),
      p2 = makePod();
    const r1 = await cni(n1, p1, { command: 'ADD', namespace: nsDefault });
    const blocksBefore = await blocksOf(n1);
    await stopCoild(n1);
    // A block the node holds in the API but no pod uses (a request answered while coild was down): the
    // start-up GC deletes it.
    await c.blocks.create({
      metadata: { name: 'default-500', labels: { [LABEL_POOL]: 'default', [LABEL_NODE]: n1.name }, finalizers: [FINALIZER] },
      index: 500,
      ipv4: '10.120.15.160/29',
    });
    n1 = await startCoild(t, n1, n1.socket);
    expect(await c.blocks.find('default-500')).toBeUndefined();
    expect(await blocksOf(n1)).toEqual(blocksBefore);
    const r2 = await cni(n1, p2, { command: 'ADD', namespace: nsDefault });
    expect(r2.code).toBe(0);
    expect(ipOf(r2.out, 4)).not.toBe(ipOf(r1.out, 4));
    const inUse = new Set((await n1.coild.podNetwork.list()).map((p) => p.ipv4));
    expect(inUse.size).toBe((await n1.coild.podNetwork.list()).length);
    expect(await blocksOf(n1)).toEqual(blocksBefore);
    expect((await cni(n1, p1, { command: 'CHECK', namespace: nsDefault, extra: { prevResult: r1.out } })).code).toBe(0);
    for (const p of [p1, p2]) expect((await cni(n1, p, { command: 'DEL', namespace: nsDefault })).code).toBe(0);
    p1.cleanup();
    p2.cleanup();
  });

  it('a pending BlockRequest does not hold up ADDs served from blocks the node already owns', async () => {
    const pin = makePod();
    expect((await cni(n1, pin, { command: 'ADD', namespace: nsDefault })).code).toBe(0); // n1 owns a default block
    const waitPool = uname('wait');
    await c.pools.create({ metadata: { name: waitPool }, spec: { blockSizeBits: 2, subnets: [{ ipv4: '10.124.0.0/24' }] } });
    const nsWait = uname('nswait');
    await new ResourceClient(t, Namespaces).create({ metadata: { name: nsWait, annotations: { [ANNOTATION_POOL]: waitPool } } });
    await ctl.stop(); // nobody answers BlockRequests now
    const slow = makePod(),
      fast = makePod();
    let slowDone = false;
    const slowAdd = cni(n1, slow, { command: 'ADD', namespace: nsWait }).then((r) => {
      slowDone = true;
      return r;
    });
    await new Promise((r) => setTimeout(r, 300));
    const fastAdd = await cni(n1, fast, { command: 'ADD', namespace: nsDefault });
    expect(fastAdd.code).toBe(0);
    expect(slowDone).toBe(false); // still waiting for its block while the other ADD completed
    ctl = new IpamController({ transport: t, registry: new Registry() });
    await ctl.start();
    const r = await slowAdd;
    expect(r.code).toBe(0);
    expect(ipOf(r.out, 4)).toMatch(/^10\.124\.0\./);
    for (const [p, ns] of [
      [pin, nsDefault],
      [fast, nsDefault],
      [slow, nsWait],
    ] as const) {
      expect((await cni(n1, p, { command: 'DEL', namespace: ns })).code).toBe(0);
      p.cleanup();
    }
  });

  it('bad input yields a CNI error and leaks nothing', async () => {
    const veths = await hostVeths(n1);
    const blocks = await blocksOf(n1);
    const p = makePod();
    const bad = await cni(n1, p, { command: 'ADD', namespace: nsBad });
    expect(bad).toMatchObject({ code: 1, out: { code: 7 } });
    expect(String(bad.out?.['msg'])).toMatch(/malformed/);
    const unknown = await cni(n1, p, { command: 'ADD', namespace: nsUnknown });
    expect(unknown).toMatchObject({ code: 1, out: { code: 7, msg: 'address pool not found' } });
    // The tiny pool holds two addresses (two /32 blocks): the third ADD finds it exhausted.
    const q1 = makePod(),
      q2 = makePod();
    expect((await cni(n1, q1, { command: 'ADD', namespace: nsTiny })).code).toBe(0);
    expect((await cni(n1, q2, { command: 'ADD', namespace: nsTiny })).code).toBe(0);
    const full = await cni(n1, p, { command: 'ADD', namespace: nsTiny });
    expect(full).toMatchObject({ code: 1, out: { code: 11, msg: 'address pool exhausted' } });
    const noNetns = await cni(n1, p, { command: 'ADD', namespace: nsDefault, netns: '/var/run/netns/coil-no-such-ns' });
    expect(noNetns.out?.['code']).toBe(3);
    // An interface name already taken in the pod: rolled back, address released.
    sh(p.ns, 'ip link add eth0 type veth peer name eth0p');
    const taken = await cni(n1, p, { command: 'ADD', namespace: nsDefault });
    expect(taken.code).toBe(1);
    for (const q of [q1, q2]) expect((await cni(n1, q, { command: 'DEL', namespace: nsTiny })).code).toBe(0);
    expect(await hostVeths(n1)).toBe(veths);
    await eventually('no leaked blocks', async () => JSON.stringify(await blocksOf(n1)) === JSON.stringify(blocks));
    expect((await cni(n1, p, { command: 'DEL', namespace: nsDefault })).code).toBe(0);
    for (const x of [p, q1, q2]) x.cleanup();
  });

  it('a pool with blocks cannot be deleted until they are gone', async () => {
    const poolName = uname('gone');
    await c.pools.create({ metadata: { name: poolName }, spec: { blockSizeBits: 2, subnets: [{ ipv4: '10.123.0.0/24' }] } });
    const nsName = uname('nsgone');
    await new ResourceClient(t, Namespaces).create({ metadata: { name: nsName, annotations: { [ANNOTATION_POOL]: poolName } } });
    await eventually('pool finalizer', async () => (await c.pools.get(poolName)).metadata.finalizers?.includes(FINALIZER));
    const p = makePod();
    expect((await cni(n1, p, { command: 'ADD', namespace: nsName })).code).toBe(0);
    await c.pools.delete(poolName);
    await new Promise((r) => setTimeout(r, 1000));
    expect((await c.pools.get(poolName)).metadata.deletionTimestamp).toBeDefined();
    expect((await cni(n1, p, { command: 'DEL', namespace: nsName })).code).toBe(0);
    await eventually('pool gone', async () => !(await c.pools.find(poolName)));
    p.cleanup();
  });

  it('GC removes attachments not in valid-attachments; STATUS answers; metrics are exported', async () => {
    const keep = makePod(),
      drop = makePod();
    const rk = await cni(n1, keep, { command: 'ADD', namespace: nsDefault });
    expect((await cni(n1, drop, { command: 'ADD', namespace: nsDefault })).code).toBe(0);
    const gc = await cni(n1, undefined, {
      command: 'GC',
      extra: {
        'cni.dev/valid-attachments': [
          { containerID: keep.containerId, ifname: 'eth0' },
          ...(await otherPods(drop.containerId)),
          // ~250 KB of request: several HTTP/2 frames and window updates on the way to coild
          ...Array.from({ length: 4000 }, (_, i) => ({ containerID: `elsewhere-${i}-${'x'.repeat(20)}`, ifname: 'eth0' })),
        ],
      },
    });
    expect(gc.code).toBe(0);
    const left = (await n1.coild.podNetwork.list()).map((p) => p.containerId);
    expect(left).toContain(keep.containerId);
    expect(left).not.toContain(drop.containerId);
    expect((await cni(n1, undefined, { command: 'STATUS' })).code).toBe(0);
    expect(fs.statSync(n1.socket).mode & 0o777).toBe(0o600);
    const down = await cni({ ...n1, socket: '/tmp/coil-no-such.sock' }, undefined, { command: 'STATUS' });
    expect(down.out?.['code']).toBe(50);
    const text = await n1.registry.metrics();
    expect(text).toMatch(
      /grpc_server_handled_total\{grpc_type="unary",grpc_service="pkg.cnirpc.CNI",grpc_method="Add",grpc_code="OK"\} \d+/,
    );
    expect(text).toContain('grpc_server_handling_seconds_bucket');
    expect((await cni(n1, keep, { command: 'DEL', namespace: nsDefault })).code).toBe(0);
    void rk;
    keep.cleanup();
    drop.cleanup();
  });
});

/** Attachments of the pods other tests left on node 1 (GC must keep them). */
async function otherPods(except: string): Promise<{ containerID: string; ifname: string }[]> {
  return (await n1.coild.podNetwork.list())
    .filter((p) => p.containerId !== except)
    .map((p) => ({ containerID: p.containerId, ifname: p.ifname }));
}

describe.each(['0.3.1', '0.4.0', '1.0.0', '1.1.0'])('coil [%s]', (version) => {
  it('ADD returns a result of that version; CHECK where allowed; DEL twice', async () => {
    const p = makePod();
    const add = await cni(n2, p, { command: 'ADD', version, namespace: nsDefault });
    expect(add.code).toBe(0);
    expect(add.out?.['cniVersion']).toBe(version);
    const ips = add.out?.['ips'] as { address: string; version?: string }[];
    if (version.startsWith('0.')) expect(ips[0]?.version).toBe('4');
    const check = await cni(n2, p, { command: 'CHECK', version, namespace: nsDefault, extra: { prevResult: add.out } });
    expect(check.code).toBe(version === '0.3.1' ? 1 : 0);
    for (let i = 0; i < 2; i++) expect((await cni(n2, p, { command: 'DEL', version, namespace: nsDefault })).code).toBe(0);
    expect(n2.coild.pods().some((x) => x.containerId === p.containerId)).toBe(false);
    p.cleanup();
  });
});

it('coil rejects CNI 0.3.0 and a bad socket field', async () => {
  const p = makePod();
  expect((await cni(n1, p, { command: 'ADD', version: '0.3.0' })).out?.['code']).toBe(1);
  expect((await cni(n1, p, { command: 'ADD', extra: { socket: 5 } })).out?.['code']).toBe(7);
  p.cleanup();
});

describe('stale DEL (kubelet re-created the sandbox)', () => {
  it("DEL of the old container ID frees only its own address and leaves the new sandbox's host veth and routes", async () => {
    const podName = uname('resandboxed-');
    const a = makePod(),
      b = makePod();
    const ra = await cni(n2, a, { command: 'ADD', namespace: nsDefault, podName });
    expect(ra.code).toBe(0);
    const pathA = a.path;
    a.cleanup(); // sandbox A dies with its netns
    const rb = await cni(n2, b, { command: 'ADD', namespace: nsDefault, podName });
    expect(rb.code).toBe(0);
    const ipB = ipOf(rb.out, 4)!;

    const del = await cni(n2, a, { command: 'DEL', namespace: nsDefault, podName, netns: pathA, extra: { prevResult: ra.out } });
    expect(del.code).toBe(0);
    expect(n2.coild.pods().map((x) => x.containerId)).toContain(b.containerId);
    expect(n2.coild.pods().map((x) => x.containerId)).not.toContain(a.containerId);
    expect((await link.list(n2.ns)).some((l) => l.alias === `COIL:default:${b.containerId}:eth0`)).toBe(true);
    expect((await route.list(n2.ns, { table: 116 })).some((r) => r.dst === `${ipB}/32`)).toBe(true);
    expect((await cni(n2, b, { command: 'CHECK', namespace: nsDefault, podName, extra: { prevResult: rb.out } })).code).toBe(0);
    // B's address stays allocated: a new pod does not get it.
    const c = makePod();
    const rc = await cni(n2, c, { command: 'ADD', namespace: nsDefault });
    expect(ipOf(rc.out, 4)).not.toBe(ipB);
    for (const p of [b, c]) expect((await cni(n2, p, { command: 'DEL', namespace: nsDefault })).code).toBe(0);
    b.cleanup();
    c.cleanup();
  });
});
