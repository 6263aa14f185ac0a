/**
 * CRD validation and coil-ipam-controller against a real kube-apiserver (+ the garbage collector).
 */
import { Nodes, ResourceClient, isInvalid, type KubeTransport, type LeaderRunner } from '@cnikit/kube';
import { Registry } from '@cnikit/kube/prom';
import { FINALIZER, LABEL_NODE, LABEL_POOL, requestName, requestOutcome, type AddressPool, type BlockRequest } from '../src/api/types';
import { IpamController } from '../src/controller/ipam-controller';
import { ipamLeaderTask } from '../src/controller/leader';
import { clients, createNode, eventually, installCoilCrds, testRunner, transport, uname } from './support';

let t: KubeTransport;
let c: ReturnType<typeof clients>;

beforeAll(async () => {
  t = transport();
  await installCoilCrds(t);
  c = clients(t);
});

function pool(name: string, spec: AddressPool['spec']): AddressPool {
  return { metadata: { name }, spec };
}

describe('AddressPool validation (CEL)', () => {
  it.each([
    ['bad v4 CIDR', { blockSizeBits: 5, subnets: [{ ipv4: '10.0.0.0/33' }] }],
    ['v6 in ipv4', { blockSizeBits: 5, subnets: [{ ipv4: 'fd00::/64' }] }],
    ['v4 in ipv6', { blockSizeBits: 5, subnets: [{ ipv6: '10.0.0.0/24' }] }],
    ['too few host bits', { blockSizeBits: 5, subnets: [{ ipv4: '10.0.0.0/28' }] }],
    ['dual-stack sizes differ', { blockSizeBits: 5, subnets: [{ ipv4: '10.0.0.0/24', ipv6: 'fd00::/112' }] }],
    ['empty subnet', { blockSizeBits: 5, subnets: [{}] }],
    ['no subnets', { blockSizeBits: 5, subnets: [] }],
    ['negative blockSizeBits', { blockSizeBits: -1, subnets: [{ ipv4: '10.0.0.0/24' }] }],
  ])('rejects %s', async (_what, spec) => {
    const err = await c.pools.create(pool(uname('bad'), spec as AddressPool['spec'])).catch((e: unknown) => e);
    expect(isInvalid(err)).toBe(true);
  });

  it('defaults blockSizeBits to 5; keeps it immutable; subnets append-only', async () => {
    const name = uname('val');
    const p = await c.pools.create({
      metadata: { name },
      spec: { subnets: [{ ipv4: '10.100.0.0/24', ipv6: 'fd00:100::/120' }] } as AddressPool['spec'],
    });
    expect(p.spec.blockSizeBits).toBe(5);
    const bad1 = await c.pools.patch(name, { spec: { blockSizeBits: 4 } }).catch((e: unknown) => e);
    expect(isInvalid(bad1)).toBe(true);
    const bad2 = await c.pools.patch(name, { spec: { subnets: [{ ipv4: '10.101.0.0/24' }] } }).catch((e: unknown) => e);
    expect(isInvalid(bad2)).toBe(true);
    const ok = await c.pools.patch(name, {
      spec: { subnets: [{ ipv4: '10.100.0.0/24', ipv6: 'fd00:100::/120' }, { ipv4: '10.101.0.0/24' }] },
    });
    expect(ok.spec.subnets).toHaveLength(2);
    await c.pools.delete(name);
  });
});

describe('coil-ipam-controller', () => {
  let ctl: IpamController;
  let registry: Registry;
  beforeAll(async () => {
    registry = new Registry();
    ctl = new IpamController({ transport: t, registry, gcIntervalMs: 3_600_000 });
    await ctl.start();
  });
  afterAll(async () => {
    await ctl.stop();
  });

  async function request(poolName: string, nodeName: string): Promise<BlockRequest> {
    const node = await new ResourceClient(t, Nodes).get(nodeName);
    const req = await c.requests.create({
      metadata: {
        name: requestName(poolName, nodeName),
        ownerReferences: [
          { apiVersion: 'v1', kind: 'Node', name: nodeName, uid: node.metadata.uid!, controller: false, blockOwnerDeletion: false },
        ],
      },
      spec: { nodeName, poolName },
    });
    const done = await eventually('request answered', async () => {
      const r = await c.requests.get(req.metadata.name!);
      return requestOutcome(r) ? r : undefined;
    });
    await c.requests.delete(req.metadata.name!);
    return done;
  }

  it('carves IPv4, IPv6 and dual-stack blocks in order, not reusing a freed index at once', async () => {
    const node = uname('n');
    await createNode(t, node);
    const p4 = uname('p'),
      p6 = uname('p'),
      pd = uname('p');
    await c.pools.create(pool(p4, { blockSizeBits: 5, subnets: [{ ipv4: '10.110.0.0/26' }, { ipv4: '10.111.0.0/27' }] }));
    await c.pools.create(pool(p6, { blockSizeBits: 4, subnets: [{ ipv6: 'fd00:110::/120' }] }));
    await c.pools.create(pool(pd, { blockSizeBits: 5, subnets: [{ ipv4: '10.112.0.0/24', ipv6: 'fd00:112::/120' }] }));
    await eventually('pool finalizer', async () => (await c.pools.get(p4)).metadata.finalizers?.includes(FINALIZER));

    const r1 = await request(p4, node);
    expect(requestOutcome(r1)?.type).toBe('Complete');
    const b1 = await c.blocks.get(r1.status!.addressBlockName!);
    expect(b1.metadata.name).toBe(`${p4}-0`);
    expect(b1).toMatchObject({ index: 0, ipv4: '10.110.0.0/27' });
    expect(b1.metadata.labels).toMatchObject({ [LABEL_POOL]: p4, [LABEL_NODE]: node });
    expect(b1.metadata.finalizers).toEqual([FINALIZER]);
    expect(b1.metadata.ownerReferences?.[0]).toMatchObject({ kind: 'AddressPool', name: p4, controller: true, blockOwnerDeletion: true });
    const r2 = await request(p4, node);
    expect((await c.blocks.get(r2.status!.addressBlockName!)).ipv4).toBe('10.110.0.32/27');
    // Free block 0: the next carve goes on to index 2 (second subnet), not back to 0.
    await c.blocks.patch(`${p4}-0`, { metadata: { finalizers: [] } });
    await c.blocks.delete(`${p4}-0`);
    const r3 = await request(p4, node);
    expect(await c.blocks.get(r3.status!.addressBlockName!)).toMatchObject({ index: 2, ipv4: '10.111.0.0/27' });
    const r4 = await request(p4, node);
    expect(await c.blocks.get(r4.status!.addressBlockName!)).toMatchObject({ index: 0 });
    const r5 = await request(p4, node);
    expect(requestOutcome(r5)).toMatchObject({ type: 'Failed', reason: 'PoolExhausted' });

    const r6 = await request(p6, node);
    expect(await c.blocks.get(r6.status!.addressBlockName!)).toMatchObject({ index: 0, ipv6: 'fd00:110::/124' });
    const rd1 = await request(pd, node);
    const rd2 = await request(pd, node);
    expect(await c.blocks.get(rd2.status!.addressBlockName!)).toMatchObject({ index: 1, ipv4: '10.112.0.32/27', ipv6: 'fd00:112::20/123' });
    expect(rd1.status!.addressBlockName).toBe(`${pd}-0`);

    const unknown = await request(uname('nopool'), node);
    expect(requestOutcome(unknown)).toMatchObject({ type: 'Failed', reason: 'PoolNotFound' });

    // Metrics.
    await eventually('metrics', async () => {
      const text = await registry.metrics();
      return (
        text.includes(`coil_controller_max_blocks{pool="${p4}"} 3`) && text.includes(`coil_controller_allocated_blocks{pool="${p4}"} 3`)
      );
    });
  });

  it('concurrent requests of many nodes never share a block', async () => {
    const p = uname('p');
    await c.pools.create(pool(p, { blockSizeBits: 2, subnets: [{ ipv4: '10.113.0.0/24' }] }));
    const nodes = Array.from({ length: 8 }, () => uname('cn'));
    for (const n of nodes) await createNode(t, n);
    const reqs = await Promise.all(nodes.map((n) => request(p, n)));
    const names = reqs.map((r) => r.status?.addressBlockName);
    expect(new Set(names).size).toBe(8);
    const blocks = (await c.blocks.list({ labelSelector: `${LABEL_POOL}=${p}` })).items;
    expect(blocks).toHaveLength(8);
  });

  it('holds a pool with blocks until they are gone; deletes blocks of deleted nodes', async () => {
    const node = uname('n');
    await createNode(t, node);
    const p = uname('p');
    await c.pools.create(pool(p, { blockSizeBits: 5, subnets: [{ ipv4: '10.114.0.0/24' }] }));
    await eventually('finalizer', async () => (await c.pools.get(p)).metadata.finalizers?.includes(FINALIZER));
    const r = await request(p, node);
    const blockName = r.status!.addressBlockName!;
    await c.pools.delete(p);
    await new Promise((res) => setTimeout(res, 1500));
    const held = await c.pools.find(p);
    expect(held?.metadata.deletionTimestamp).toBeDefined();
    expect(await c.blocks.find(blockName)).toBeDefined();
    // The node goes away: the controller deletes its blocks, then the pool goes too.
    await c.nodes.delete(node);
    await eventually('block deleted', async () => !(await c.blocks.find(blockName)));
    await eventually('pool deleted', async () => !(await c.pools.find(p)));
  });

  it('GC removes dangling blocks whose node does not exist', async () => {
    const p = uname('p');
    const pl = await c.pools.create(pool(p, { blockSizeBits: 5, subnets: [{ ipv4: '10.115.0.0/24' }] }));
    void pl;
    await c.blocks.create({
      metadata: { name: `${p}-7`, labels: { [LABEL_POOL]: p, [LABEL_NODE]: 'no-such-node' }, finalizers: [FINALIZER] },
      index: 7,
      ipv4: '10.115.0.224/27',
    });
    expect(await ctl.gcDangling()).toBeGreaterThanOrEqual(1);
    await eventually('dangling block gone', async () => !(await c.blocks.find(`${p}-7`)));
  });
});

describe('leader election', () => {
  it('only the leader carves; a standby takes over when the leader stops', async () => {
    const lease = uname('coil-leader');
    const lost: string[] = [];
    const make = (id: string): { ctl: IpamController; runner: LeaderRunner } => {
      const ctl = new IpamController({ transport: t, registry: new Registry() });
      const runner = testRunner(ipamLeaderTask(ctl), t, lease, id, () => lost.push(id));
      return { ctl, runner };
    };
    const a = make('a');
    const b = make('b');
    void a.runner.run();
    await eventually('a leads', () => a.runner.isLeader());
    void b.runner.run();
    const node = uname('n');
    await createNode(t, node);
    const p = uname('p');
    await c.pools.create(pool(p, { blockSizeBits: 5, subnets: [{ ipv4: '10.116.0.0/24' }] }));
    const ask = async (): Promise<BlockRequest> => {
      const n = await c.nodes.get(node);
      await c.requests.create({
        metadata: { name: requestName(p, node), ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: node, uid: n.metadata.uid! }] },
        spec: { nodeName: node, poolName: p },
      });
      const done = await eventually(
        'answered',
        async () => {
          const r = await c.requests.get(requestName(p, node));
          return requestOutcome(r) ? r : undefined;
        },
        20_000,
      );
      await c.requests.delete(requestName(p, node));
      return done;
    };
    expect(requestOutcome(await ask())?.type).toBe('Complete');
    expect(b.runner.isLeader()).toBe(false);
    await a.runner.stop();
    await eventually('b leads', () => b.runner.isLeader(), 20_000);
    const r2 = await ask();
    expect(r2.status?.addressBlockName).toBe(`${p}-1`);
    await b.runner.stop();
    expect(lost).toEqual([]);
  });
});
