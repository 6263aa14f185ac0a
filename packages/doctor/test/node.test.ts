// doctor node: the readers against files laid out as libcni and host-local write them, the host-veth scan in a
// real network namespace, and the join's verdicts.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Agent, CiliumNodes, agentRequest, ciliumNodeCrd, type CiliumNode } from '@cnikit/cilium-eni-ipam';
import { CreateNetworkInterfaceCommand, UnassignPrivateIpAddressesCommand } from '@aws-sdk/client-ec2';
import { makeWorld, startMoto } from '@cnikit/cilium-eni-ipam-testing';
import { FakeOpenApi } from '@cnikit/aliyun-emulator';
import { FakeGce } from '@cnikit/gce-emulator';
import { clientFor, installCrd } from '@cnikit/kube';
import { testCluster, transportFor, uniqueName } from '@cnikit/kube-testing';
import { link } from '@cnikit/netlib';
import { cleanupAll, newNs, sh } from '@cnikit/netlib-testing';
import { joinNode, formatNode, type NodeSources } from '../src/node/join';
import { attachmentKey } from '@cnikit/router/marks';
import { cloudFor } from '@cnikit/terway-testing';
import { healthyNode, sandbox } from './support';
import {
  coilVeths,
  hostVeths,
  readCache,
  readCiliumCloud,
  readCiliumLeases,
  readGcpCloud,
  readGcpRecords,
  readHostLocalLeases,
  readTerwayCloud,
  readTerwayLeases,
  type CachedAttachment,
  type CiliumLease,
} from '../src/node/sources';

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'doctor-node-'));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));
afterAll(() => cleanupAll());

const b64 = (o: unknown): string => Buffer.from(JSON.stringify(o)).toString('base64');

/** A cache entry as libcni writes it (`results/<network>-<containerID>-<ifname>`). */
function cacheEntry(cacheDir: string, network: string, containerId: string, ifName: string, conf: unknown, ips: string[]): void {
  fs.mkdirSync(path.join(cacheDir, 'results'), { recursive: true });
  const entry = {
    kind: 'cniCacheV1',
    containerId,
    config: b64(conf),
    ifName,
    networkName: network,
    netns: `/var/run/netns/cni-${containerId.slice(0, 8)}`,
    result: { cniVersion: '1.1.0', ips: ips.map((address) => ({ address: `${address}/24` })) },
  };
  fs.writeFileSync(path.join(cacheDir, 'results', `${network}-${containerId}-${ifName}`), JSON.stringify(entry));
}

function lease(dataDir: string, network: string, ip: string, containerId: string, ifName: string): void {
  fs.mkdirSync(path.join(dataDir, network), { recursive: true });
  fs.writeFileSync(path.join(dataDir, network, ip), `${containerId}\n${ifName}`);
}

const vethChain = {
  cniVersion: '1.1.0',
  name: 'macvlan-veth',
  plugins: [{ type: 'macvlan', ipam: { type: 'host-local' } }, { type: 'veth' }],
};

test('readCache: cniCacheV1 entries of every cache dir, with the chain and IPAM types; other files listed as unreadable', () => {
  cacheEntry(dir, 'macvlan-veth', 'c1', 'net1', vethChain, ['10.9.0.5']);
  cacheEntry(path.join(dir, 'multus'), 'k8s-pod-network', 'c1', 'eth0', { cniVersion: '1.1.0', name: 'k8s-pod-network', type: 'coil' }, [
    '10.1.0.2',
  ]);
  fs.writeFileSync(path.join(dir, 'results', 'garbage'), '{');
  const { attachments, unreadable } = readCache([dir, path.join(dir, 'multus')]);
  expect(attachments.map(({ file: _file, entry: _entry, ...a }) => a)).toEqual([
    { network: 'macvlan-veth', containerId: 'c1', ifName: 'net1', plugins: ['macvlan', 'veth'], ipam: ['host-local'], ips: ['10.9.0.5'] },
    { network: 'k8s-pod-network', containerId: 'c1', ifName: 'eth0', plugins: ['coil'], ipam: [], ips: ['10.1.0.2'] },
  ]);
  expect(unreadable).toEqual([path.join(dir, 'results', 'garbage')]);
  expect(readCache([path.join(dir, 'absent')])).toEqual({ attachments: [], unreadable: [] });
});

test('readHostLocalLeases: one lease per IP file, the lock and last_reserved_ip files left out', () => {
  lease(dir, 'macvlan-veth', '10.9.0.5', 'c1', 'net1');
  fs.writeFileSync(path.join(dir, 'macvlan-veth', 'lock'), '');
  fs.writeFileSync(path.join(dir, 'macvlan-veth', 'last_reserved_ip.0'), '10.9.0.5');
  fs.writeFileSync(path.join(dir, 'macvlan-veth', '10.9.0.6'), 'c2'); // host-local before 0.7: the ID alone
  expect(readHostLocalLeases(dir)).toEqual([
    { network: 'macvlan-veth', ip: '10.9.0.5', containerId: 'c1', ifName: 'net1' },
    { network: 'macvlan-veth', ip: '10.9.0.6', containerId: 'c2' },
  ]);
});

test('hostVeths: links with the veth plugin alias, by network and container; other links ignored', async () => {
  const t = newNs('doc');
  sh(
    t.name,
    'ip link add vethaaaa type veth peer name vethbbbb && ip link add vethcccc type veth peer name vethdddd && ip link set vethcccc alias someone-else',
  );
  const [a] = (await link.list(t.ns)).filter((l) => l.name === 'vethaaaa');
  await link.setAlias(t.ns, a!.index, 'cnikit-veth:macvlan-veth:c1');
  expect(await hostVeths(t.ns)).toEqual([{ name: 'vethaaaa', network: 'macvlan-veth', containerId: 'c1' }]);
});

describe('joinNode', () => {
  const healthy: NodeSources = healthyNode();

  test('a ready sandbox holding every object its attachments imply is healthy', () => {
    const rows = joinNode(healthy);
    expect(rows).toEqual([
      expect.objectContaining({ containerId: 'c1', pod: 'default/web', sandbox: 'ready', state: 'healthy', problems: [] }),
    ]);
    expect(rows[0]!.objects).toEqual(['cache macvlan-veth/net1 10.9.0.5', 'lease macvlan-veth 10.9.0.5', 'veth vethc1 (macvlan-veth)']);
    expect(formatNode(rows)).toContain('1 healthy, 0 leaked, 0 broken, 0 conflicting');
  });

  test('objects of a gone or stopped sandbox are leaked', () => {
    const rows = joinNode({
      ...healthy,
      sandboxes: [sandbox('c2', 'old', false)],
      leases: [...healthy.leases, { network: 'macvlan-veth', ip: '10.9.0.6', containerId: 'c2' }],
    });
    expect(rows.map((r) => [r.containerId, r.sandbox, r.state])).toEqual([
      ['c2', 'stopped', 'leaked'],
      ['c1', 'gone', 'leaked'],
    ]);
    expect(rows[1]!.problems).toEqual(['the runtime has no such sandbox']);
  });

  test('a ready sandbox missing its host veth or its lease is broken, with each missing object named', () => {
    const rows = joinNode({ ...healthy, leases: [], veths: [] });
    expect(rows[0]!.state).toBe('broken');
    expect(rows[0]!.problems).toEqual([
      "macvlan-veth/net1: no host veth (the veth plugin's CHECK fails)",
      'macvlan-veth/net1: 10.9.0.5 has no host-local lease (another pod may be given it)',
    ]);
  });

  test('one IP held by two ready sandboxes: both conflicting; a gone holder and loopback addresses do not count', () => {
    const lo = (id: string) => ({
      file: 'lo',
      network: 'cni-loopback',
      containerId: id,
      ifName: 'lo',
      plugins: ['loopback'],
      ipam: [],
      ips: ['127.0.0.1', '::1'],
      entry: {},
    });
    const rows = joinNode({
      ...healthy,
      cached: [...healthy.cached, lo('c1'), lo('c3')],
      sandboxes: [sandbox('c1', 'web'), sandbox('c3', 'other')],
      leases: [
        ...healthy.leases,
        { network: 'macvlan-veth', ip: '10.9.0.5', containerId: 'c3' },
        { network: 'macvlan-veth', ip: '10.9.0.5', containerId: 'gone' },
      ],
    });
    const byId = Object.fromEntries(rows.map((r) => [r.containerId, r]));
    expect(byId.c1!.state).toBe('conflicting');
    expect(byId.c1!.problems).toEqual(['10.9.0.5 is also held by c3']);
    expect(byId.c3!.state).toBe('conflicting');
    expect(byId.gone!.state).toBe('leaked');
  });
});

test('joinNode: a sandbox being created (in containerd store, not yet listed by the CRI) is healthy, not leaked nor broken', () => {
  const rows = joinNode({
    sandboxes: [{ id: 'c9', namespace: '', name: '', uid: '', ready: false, creating: true }],
    cached: [],
    leases: [{ network: 'macvlan-veth', ip: '10.9.0.9', containerId: 'c9', ifName: 'net1' }],
    veths: [],
    coil: [],
    router: [],
    terway: [],
  });
  expect(rows).toEqual([expect.objectContaining({ containerId: 'c9', sandbox: 'creating', state: 'healthy', problems: [] })]);
  expect(rows[0]!.pod).toBeUndefined();
});

test("coilVeths: Coil's host veths by alias, each with the addresses its pod table routes to it", async () => {
  const t = newNs('doc');
  sh(t.name, 'ip link add vethcoil1 type veth peer name vethcoil2 && ip link set vethcoil1 up && ip link set vethcoil2 up');
  sh(t.name, 'ip route add 10.1.0.2/32 dev vethcoil1 table 116 && ip route add 10.1.0.0/24 dev vethcoil1 table 116');
  const [v] = (await link.list(t.ns)).filter((l) => l.name === 'vethcoil1');
  await link.setAlias(t.ns, v!.index, 'COIL:default:c1:eth0');
  expect(await coilVeths(t.ns)).toEqual([{ name: 'vethcoil1', pool: 'default', containerId: 'c1', ifName: 'eth0', ips: ['10.1.0.2'] }]);
});

describe('joinNode, Coil', () => {
  const coilConf = (id: string, ip: string): CachedAttachment => ({
    file: `k8s-pod-network-${id}-eth0`,
    network: 'k8s-pod-network',
    containerId: id,
    ifName: 'eth0',
    plugins: ['coil'],
    ipam: [],
    ips: [ip],
    entry: {},
  });
  const coilVeth = (id: string, ips: string[]) => ({ name: `veth${id}`, pool: 'default', containerId: id, ifName: 'eth0', ips });
  const base = { sandboxes: [sandbox('c1', 'web')], cached: [coilConf('c1', '10.1.0.2')], leases: [], veths: [], router: [], terway: [] };

  test('a cached Coil attachment with its host veth and pod-table route is healthy; without the route, broken (Coil #370)', () => {
    const [ok] = joinNode({ ...base, coil: [coilVeth('c1', ['10.1.0.2'])] });
    expect(ok).toMatchObject({
      state: 'healthy',
      objects: ['cache k8s-pod-network/eth0 10.1.0.2', 'coil vethc1 eth0 10.1.0.2 (pool default)'],
    });
    const [noRoute] = joinNode({ ...base, coil: [coilVeth('c1', [])] });
    expect(noRoute).toMatchObject({
      state: 'broken',
      problems: ["k8s-pod-network/eth0: 10.1.0.2 has no route in Coil's table 116 (nothing on the node reaches the pod)"],
    });
    const [noVeth] = joinNode({ ...base, coil: [] });
    expect(noVeth!.problems).toEqual(["k8s-pod-network/eth0: no Coil host veth (coil's CHECK fails)"]);
  });

  test("a Coil veth of a gone sandbox is leaked; one IP on two ready pods' Coil veths is a conflict", () => {
    const rows = joinNode({ ...base, coil: [coilVeth('c1', ['10.1.0.2']), coilVeth('old', ['10.1.0.9'])] });
    expect(rows.find((r) => r.containerId === 'old')).toMatchObject({ state: 'leaked', sandbox: 'gone' });
    const clash = joinNode({
      ...base,
      sandboxes: [sandbox('c1', 'web'), sandbox('c2', 'api')],
      coil: [coilVeth('c1', ['10.1.0.2']), coilVeth('c2', ['10.1.0.2'])],
    });
    expect(clash.map((r) => r.state)).toEqual(['conflicting', 'conflicting']);
  });

  test("router's host route belongs to the attachment its key names: healthy with it, broken without it, leaked when no sandbox holds the key", () => {
    const routerConf: CachedAttachment = {
      ...coilConf('c1', '198.51.100.7'),
      file: 'mr-c1-net1',
      network: 'mr',
      ifName: 'net1',
      plugins: ['macvlan', 'router'],
    };
    const route = (id: string, ip: string, ifName = 'net1') => ({ ip, table: 254, link: 'vethc1', key: attachmentKey('mr', id, ifName) });
    const s: NodeSources = { ...base, coil: [], cached: [routerConf], router: [route('c1', '198.51.100.7')] };
    const [ok] = joinNode(s);
    expect(ok).toMatchObject({
      containerId: 'c1',
      state: 'healthy',
      objects: ['cache mr/net1 198.51.100.7', 'router 198.51.100.7 via vethc1 (table 254)'],
    });
    const [broken] = joinNode({ ...s, router: [] });
    expect(broken).toMatchObject({
      state: 'broken',
      problems: ["mr/net1: 198.51.100.7 has no router host route (router's CHECK fails; the node does not reach it)"],
    });
    // a route of another ifname of the same pod is its own (net2), one of a container the node does not know is leaked
    const rows = joinNode({ ...s, router: [...s.router, route('c1', '198.51.100.8', 'net2'), route('gone', '198.51.100.9')] });
    expect(rows.find((r) => r.containerId === 'c1')!.objects).toContain('router 198.51.100.8 via vethc1 (table 254)');
    const key = attachmentKey('mr', 'gone', 'net1');
    expect(rows.find((r) => r.containerId === `router-key:${key}`)).toMatchObject({ state: 'leaked', sandbox: 'gone' });
  });
});

describe('terway leases', () => {
  test("read from terwayd's state file; a lease reserved for a pod's return is left out; no file, none", () => {
    const file = path.join(dir, 'pod.json');
    expect(readTerwayLeases(file)).toEqual([]);
    const leases = [
      { key: 'default/a', ip: '10.1.0.5', eniId: 'eni-1', containerId: 'c1' },
      { key: 'default/b', ip: '10.1.0.6', ip6: 'fd00::6', eniId: 'eni-1', containerId: 'c2' },
      { key: 'default/s-0', ip: '10.1.0.7', eniId: 'eni-2', containerId: 'c3', reservedUntil: 2_000 },
    ];
    fs.writeFileSync(file, JSON.stringify({ version: 1, leases }));
    expect(readTerwayLeases(file, 1_000)).toEqual([
      { ip: '10.1.0.5', eniId: 'eni-1', containerId: 'c1' },
      { ip: '10.1.0.6', ip6: 'fd00::6', eniId: 'eni-1', containerId: 'c2' },
    ]);
    expect(readTerwayLeases(file, 3_000).map((l) => l.containerId)).toEqual(['c1', 'c2', 'c3']);
  });

  test("a ready sandbox's lease is healthy, a gone one's leaked, one address on two ready sandboxes conflicting", () => {
    const lease = (containerId: string, ip: string) => ({ ip, eniId: 'eni-1', containerId });
    const s: NodeSources = {
      ...healthyNode(),
      cached: [],
      leases: [],
      veths: [],
      sandboxes: [sandbox('c1', 'web'), sandbox('c2', 'api')],
      terway: [lease('c1', '10.1.0.5')],
    };
    expect(joinNode(s)).toEqual([
      expect.objectContaining({ containerId: 'c1', state: 'healthy', objects: ['terway 10.1.0.5 (eni eni-1)'] }),
    ]);
    const gone = joinNode({ ...s, terway: [lease('old', '10.1.0.9')] });
    expect(gone).toEqual([expect.objectContaining({ containerId: 'old', state: 'leaked', sandbox: 'gone' })]);
    const clash = joinNode({ ...s, terway: [lease('c1', '10.1.0.5'), lease('c2', '10.1.0.5')] });
    expect(clash.map((r) => r.state)).toEqual(['conflicting', 'conflicting']);
  });

  test('--cloud (the Alibaba Cloud emulator): a lease whose address ECS no longer assigns to its ENI, or whose ENI is gone, is broken; an unanswered ECS judges nothing', async () => {
    const api = new FakeOpenApi();
    api.addVSwitch('vsw-a', 'cn-hangzhou-i', '10.1.0.0/24');
    api.addInstanceType('ecs.g7.large', { eniQuantity: 3, eniPrivateIpAddressQuantity: 10 });
    api.addInstance('i-node1', 'ecs.g7.large', 'vsw-a');
    await api.listen();
    const keys = { id: process.env.ALIBABA_CLOUD_ACCESS_KEY_ID, secret: process.env.ALIBABA_CLOUD_ACCESS_KEY_SECRET };
    try {
      // doctor takes the keys as terwayd does, from the environment; without them it says so
      delete process.env.ALIBABA_CLOUD_ACCESS_KEY_ID;
      expect(await readTerwayCloud([{ ip: '10.1.0.9', eniId: 'eni-x', containerId: 'c1' }], {})).toEqual({
        enis: {},
        error: expect.stringMatching(/^no access key: set ALIBABA_CLOUD_ACCESS_KEY_ID/),
      });
      process.env.ALIBABA_CLOUD_ACCESS_KEY_ID = 'LTAI-test';
      process.env.ALIBABA_CLOUD_ACCESS_KEY_SECRET = 'test-secret';
      const cloud = cloudFor(api);
      const eni = await cloud.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 2 });
      const [a, b] = eni.ips;
      await cloud.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1 }); // no lease names it: not asked for
      const leases = [
        { ip: a!, eniId: eni.eniId, containerId: 'c1' },
        { ip: b!, eniId: eni.eniId, containerId: 'c2' },
        { ip: '10.1.0.99', eniId: 'eni-gone', containerId: 'c3' },
      ];
      const where = { aliyunMetadata: `http://${api.endpoint}`, aliyunEndpoint: `http://${api.endpoint}` };
      expect(await readTerwayCloud(leases, where)).toEqual({ enis: { [eni.eniId]: { ips: expect.arrayContaining([a, b]), ipv6s: [] } } });
      await cloud.unassignIps(eni.eniId, [b!]); // freed behind terwayd's back
      const terwayCloud = await readTerwayCloud(leases, where);
      const s: NodeSources = {
        ...healthyNode(),
        cached: [],
        leases: [],
        veths: [],
        sandboxes: ['c1', 'c2', 'c3'].map((c) => sandbox(c, c)),
        terway: leases,
        ...(terwayCloud ? { terwayCloud } : {}),
      };
      const rows = joinNode(s);
      const of = (id: string) => rows.find((r) => r.containerId === id)!;
      expect(of('c1')).toMatchObject({ state: 'healthy', problems: [] });
      expect(of('c2')).toMatchObject({
        state: 'broken',
        problems: [`${b} is no longer assigned to ${eni.eniId} in ECS (freed behind terwayd's back)`],
      });
      expect(of('c3')).toMatchObject({ state: 'broken', problems: ['10.1.0.99: its ENI eni-gone no longer exists in ECS'] });
      // ECS unreachable: the error is kept, nothing is judged by it
      const down = await readTerwayCloud(leases, { ...where, aliyunEndpoint: 'http://127.0.0.1:1' });
      expect(down).toEqual({ enis: {}, error: expect.any(String) });
      expect(joinNode({ ...s, terwayCloud: down }).every((r) => r.state === 'healthy')).toBe(true);
      expect(await readTerwayCloud([{ ...leases[0]!, eniId: '' }], where)).toBeUndefined();
    } finally {
      for (const [k, v] of [
        ['ALIBABA_CLOUD_ACCESS_KEY_ID', keys.id],
        ['ALIBABA_CLOUD_ACCESS_KEY_SECRET', keys.secret],
      ] as const)
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      await api.close();
    }
  }, 60_000);
});

describe('gcp-ipam records', () => {
  test("read from its state dir's containers/ (one per attachment, named <containerID>_<ifname>); no dir, none", () => {
    const state = path.join(dir, 'gcp-ipam');
    expect(readGcpRecords(state)).toEqual([]);
    fs.mkdirSync(path.join(state, 'containers'), { recursive: true });
    const rec = { allocation: 'ippool-default.10-1-0-5', ip: '10.1.0.5', pool: 'ippool-default', network: 'k8s-pod-network' };
    fs.writeFileSync(path.join(state, 'containers', 'c1_eth0'), JSON.stringify(rec));
    fs.writeFileSync(path.join(state, 'containers', 'c2_net1.tmp'), '{"ip":'); // being written
    expect(readGcpRecords(state)).toEqual([
      { network: 'k8s-pod-network', ip: '10.1.0.5', containerId: 'c1', ifName: 'eth0', allocation: 'ippool-default.10-1-0-5' },
    ]);
  });

  test("a ready sandbox's record is healthy, a gone one's leaked, one address on two ready sandboxes conflicting", () => {
    const rec = (containerId: string, ip: string) => ({ network: 'gke', ip, containerId, ifName: 'eth0', allocation: `p.${ip}` });
    const s: NodeSources = {
      ...healthyNode(),
      cached: [],
      leases: [],
      veths: [],
      sandboxes: [sandbox('c1', 'web'), sandbox('c2', 'api')],
      gcp: [rec('c1', '10.1.0.5')],
    };
    expect(joinNode(s)).toEqual([
      expect.objectContaining({ containerId: 'c1', state: 'healthy', objects: ['gcp-ipam gke 10.1.0.5 (p.10.1.0.5)'] }),
    ]);
    expect(joinNode({ ...s, gcp: [rec('old', '10.1.0.9')] })).toEqual([
      expect.objectContaining({ containerId: 'old', state: 'leaked', sandbox: 'gone' }),
    ]);
    expect(joinNode({ ...s, gcp: [rec('c1', '10.1.0.5'), rec('c2', '10.1.0.5')] }).map((r) => r.state)).toEqual([
      'conflicting',
      'conflicting',
    ]);
  });
});

describe("gcp-ipam's cloud side (--cloud)", () => {
  const rec = (containerId: string, ip: string) => ({ network: 'gke', ip, containerId, ifName: 'eth0', allocation: `p.${ip}` });
  const node = (gcp: ReturnType<typeof rec>[], aliases: string[], error?: string): NodeSources => ({
    ...healthyNode(),
    cached: [],
    leases: [],
    veths: [],
    sandboxes: [sandbox('c1', 'web')],
    gcp,
    gcpCloud: { instance: 'vm-a', aliases, ...(error ? { error } : {}) },
  });

  test('a record whose alias the VM lacks is broken; an alias no record holds is a leaked row of its own; an unread cloud judges nothing', () => {
    expect(joinNode(node([rec('c1', '10.1.0.5')], ['10.1.0.5']))).toEqual([
      expect.objectContaining({ containerId: 'c1', state: 'healthy' }),
    ]);
    expect(joinNode(node([rec('c1', '10.1.0.5')], []))).toEqual([
      expect.objectContaining({ state: 'broken', problems: ["gke/eth0: 10.1.0.5 is no alias of vm-a (gcp-ipam's CHECK fails)"] }),
    ]);
    expect(joinNode(node([rec('c1', '10.1.0.5')], ['10.1.0.5', '10.1.0.9']))).toEqual([
      expect.objectContaining({
        containerId: 'gcp-alias:10.1.0.9',
        state: 'leaked',
        objects: ['gcp-alias 10.1.0.9/32'],
        problems: ['an alias of vm-a that no gcp-ipam attachment on the node holds'],
      }),
      expect.objectContaining({ containerId: 'c1', state: 'healthy' }),
    ]);
    expect(joinNode(node([rec('c1', '10.1.0.5')], [], 'connect ECONNREFUSED'))).toEqual([expect.objectContaining({ state: 'healthy' })]);
  });

  test("the VM's aliases are read with the ipam section of a cached gcp-ipam attachment; GCE down is an error, not a verdict", async () => {
    const fake = new FakeGce({ opDurationMs: 0 });
    const url = await fake.start(0);
    try {
      fake.addInstance('europe-west1-b', 'vm-a');
      const ipam = {
        type: 'gcp-ipam',
        pool: 'p',
        project: 'test-project',
        zone: 'europe-west1-b',
        nodeName: 'vm-a',
        computeEndpoint: `${url}/compute/v1`,
      };
      const list = { cniVersion: '1.0.0', name: 'gke', plugins: [{ type: 'ptp', ipam }] };
      const cached = (config: unknown): CachedAttachment => ({
        file: 'gke-c1-eth0',
        network: 'gke',
        containerId: 'c1',
        ifName: 'eth0',
        plugins: ['ptp'],
        ipam: ['gcp-ipam'],
        ips: ['10.1.0.5'],
        entry: { config: Buffer.from(JSON.stringify(config)).toString('base64') },
      });
      expect(await readGcpCloud([])).toBeUndefined();
      expect(await readGcpCloud([cached(list)])).toEqual({ instance: 'vm-a', aliases: [] });
      fake.inject('instances.get', { status: 503, reason: 'backendError' });
      expect(await readGcpCloud([cached(list)])).toMatchObject({ instance: 'vm-a', aliases: [], error: expect.stringMatching(/503/) });
    } finally {
      await fake.stop();
    }
  });
});

describe("cilium-eni-agent's leases", () => {
  const ENI = {
    id: 'eni-1',
    mac: '02:00:00:00:00:01',
    number: 1,
    subnet: { id: 'subnet-1', cidr: '10.0.64.0/18' },
    vpc: { id: 'vpc-1', 'primary-cidr': '10.0.0.0/16' },
  };

  test('read from the real agent on its socket (op leases): each IP with its container, ifname and ENI; no socket, none; a refusing one, an error', async () => {
    const transport = transportFor(testCluster());
    const nodes = clientFor(transport, CiliumNodes);
    await installCrd(transport, ciliumNodeCrd());
    const nodeName = uniqueName('node');
    // the operator's part, by hand: a pool on a described ENI, and a used entry without an owner the agent restores
    const pool = Object.fromEntries(['10.0.64.10', '10.0.64.11', '10.0.64.12'].map((ip) => [ip, { resource: 'eni-1' }]));
    await nodes.create({ metadata: { name: nodeName }, spec: { 'instance-id': 'i-1', ipam: { pool } } } as CiliumNode);
    await nodes.updateWithRetry(
      nodeName,
      (cur) => ({ ...cur, status: { eni: { enis: { 'eni-1': ENI } }, ipam: { used: { '10.0.64.12': { resource: 'eni-1' } } } } }),
      { subresource: 'status' },
    );
    const socket = path.join(dir, 'agent.sock');
    const agent = new Agent({
      transport,
      nodeName,
      socketPath: socket,
      instance: { instanceId: 'i-1', instanceType: 'm5.large', vpcId: 'vpc-1', availabilityZone: 'a' },
    });
    try {
      await agent.start();
      await agent.waitForPool(10_000);
      expect(await readCiliumLeases(socket)).toEqual([
        { ip: '10.0.64.12', containerId: 'cilium-eni:10.0.64.12', ifName: '', eniId: 'eni-1' },
      ]);
      for (const owner of ['c1/eth0', 'c2/net1']) expect(await agentRequest(socket, { op: 'add', owner })).toMatchObject({ ok: true });
      expect(await readCiliumLeases(socket)).toEqual([
        { ip: '10.0.64.10', containerId: 'c1', ifName: 'eth0', eniId: 'eni-1' },
        { ip: '10.0.64.11', containerId: 'c2', ifName: 'net1', eniId: 'eni-1' },
        { ip: '10.0.64.12', containerId: 'cilium-eni:10.0.64.12', ifName: '', eniId: 'eni-1' },
      ]);
    } finally {
      await agent.stop();
      await nodes.delete(nodeName).catch(() => undefined);
      transport.close();
    }
    expect(await readCiliumLeases(socket)).toBeUndefined(); // the agent gone with its socket
    fs.writeFileSync(socket, ''); // a file where the socket was: connect is refused
    await expect(readCiliumLeases(socket)).rejects.toThrow(/ECONNREFUSED/);
  });

  const lease = (containerId: string, ip: string, ifName = 'eth0'): CiliumLease => ({ ip, containerId, ifName, eniId: 'eni-1' });
  const eniChain = { cniVersion: '1.1.0', name: 'aws-eni', plugins: [{ type: 'ptp', ipam: { type: 'cilium-eni-ipam' } }] };
  const cached = (containerId: string, ip: string): CachedAttachment => ({
    file: `aws-eni-${containerId}-eth0`,
    network: 'aws-eni',
    containerId,
    ifName: 'eth0',
    plugins: ['ptp'],
    ipam: ['cilium-eni-ipam'],
    ips: [ip],
    entry: { config: b64(eniChain) },
  });
  const node = (over: Partial<NodeSources>): NodeSources => ({
    ...healthyNode(),
    cached: [],
    leases: [],
    veths: [],
    sandboxes: [sandbox('c1', 'web'), sandbox('c2', 'api')],
    ...over,
  });

  test("a ready sandbox's lease is healthy, a gone one's leaked, one address on two ready sandboxes conflicting", () => {
    expect(joinNode(node({ cilium: [lease('c1', '10.0.64.10')] }))).toEqual([
      expect.objectContaining({ containerId: 'c1', state: 'healthy', objects: ['cilium-eni 10.0.64.10 (eni eni-1)'] }),
    ]);
    expect(joinNode(node({ cilium: [lease('old', '10.0.64.11')] }))).toEqual([
      expect.objectContaining({ containerId: 'old', state: 'leaked', sandbox: 'gone', problems: ['the runtime has no such sandbox'] }),
    ]);
    expect(joinNode(node({ sandboxes: [sandbox('c1', 'web', false)], cilium: [lease('c1', '10.0.64.10')] }))).toEqual([
      expect.objectContaining({ containerId: 'c1', state: 'leaked', sandbox: 'stopped' }),
    ]);
    // the agent hands an address to one owner only: the clash is with another source (here c2's cached result)
    const clash = joinNode(node({ cached: [cached('c2', '10.0.64.10')], cilium: [lease('c1', '10.0.64.10')] }));
    expect(clash.map((r) => [r.containerId, r.state])).toEqual([
      ['c2', 'conflicting'],
      ['c1', 'conflicting'],
    ]);
    expect(clash[1]!.problems).toEqual(['10.0.64.10 is also held by c2']);
    // an IP the agent restored without an owner: a row of its own, leaked
    expect(joinNode(node({ cilium: [lease('cilium-eni:10.0.64.12', '10.0.64.12', '')] }))).toEqual([
      expect.objectContaining({
        containerId: 'cilium-eni:10.0.64.12',
        state: 'leaked',
        problems: ["an IP in cilium-eni-agent's book with no owner: no attachment holds it"],
      }),
    ]);
  });

  test("a ready pod's cached cilium-eni-ipam address the agent's book lacks is broken; an agent not read judges nothing", () => {
    expect(joinNode(node({ cached: [cached('c1', '10.0.64.10')], cilium: [lease('c1', '10.0.64.10')] }))[0]).toMatchObject({
      state: 'healthy',
      objects: ['cache aws-eni/eth0 10.0.64.10', 'cilium-eni 10.0.64.10 (eni eni-1)'],
    });
    expect(joinNode(node({ cached: [cached('c1', '10.0.64.10')], cilium: [] }))[0]).toMatchObject({
      state: 'broken',
      problems: ["aws-eni/eth0: 10.0.64.10 is not in cilium-eni-agent's book (another pod may be given it; CHECK fails)"],
    });
    expect(joinNode(node({ cached: [cached('c1', '10.0.64.10')] }))[0]).toMatchObject({ state: 'healthy' });
  });

  test('--cloud (moto): a lease whose address EC2 no longer assigns to its ENI, or whose ENI is gone, is broken; a /28 prefix holds its addresses; an unanswered EC2 judges nothing', async () => {
    const moto = await startMoto({ seed: 11 });
    try {
      const w = await makeWorld(moto.endpoint);
      const made = await w.client.send(
        new CreateNetworkInterfaceCommand({ SubnetId: w.subnets['pods-a'], SecondaryPrivateIpAddressCount: 2 }),
      );
      const eniId = made.NetworkInterface!.NetworkInterfaceId!;
      const [a, b] = made.NetworkInterface!.PrivateIpAddresses!.filter((x) => !x.Primary).map((x) => x.PrivateIpAddress!);
      const book: CiliumLease[] = [
        { ip: a!, containerId: 'c1', ifName: 'eth0', eniId },
        { ip: b!, containerId: 'c2', ifName: 'eth0', eniId },
        { ip: '10.0.64.99', containerId: 'c3', ifName: 'eth0', eniId: 'eni-0123456789abcdef0' },
      ];
      const sources = (ciliumCloud: NodeSources['ciliumCloud']): NodeSources =>
        node({ sandboxes: ['c1', 'c2', 'c3'].map((c) => sandbox(c, c)), cilium: book, ...(ciliumCloud ? { ciliumCloud } : {}) });
      await w.client.send(new CreateNetworkInterfaceCommand({ SubnetId: w.subnets['pods-a'] })); // no lease names it: not asked for
      const ec2 = { ec2Endpoint: moto.endpoint };
      expect(await readCiliumCloud(book, ec2)).toEqual({ enis: { [eniId]: { addresses: expect.arrayContaining([a, b]), prefixes: [] } } });
      // b freed behind the agent's back
      await w.client.send(new UnassignPrivateIpAddressesCommand({ NetworkInterfaceId: eniId, PrivateIpAddresses: [b!] }));
      const cloud = await readCiliumCloud(book, ec2);
      expect(cloud?.enis[eniId]?.addresses).toEqual([a]);
      const rows = joinNode(sources(cloud));
      const of = (id: string) => rows.find((r) => r.containerId === id)!;
      expect(of('c1')).toMatchObject({ state: 'healthy', problems: [] });
      expect(of('c2')).toMatchObject({
        state: 'broken',
        problems: [`${b} is no longer assigned to ${eniId} in EC2 (freed behind the agent's back)`],
      });
      expect(of('c3')).toMatchObject({ state: 'broken', problems: ['10.0.64.99: its ENI eni-0123456789abcdef0 no longer exists in EC2'] });
      // an address inside one of the ENI's /28 prefixes is assigned
      const prefixed = joinNode(sources({ enis: { [eniId]: { addresses: [a!], prefixes: [`${b}/32`] } } }));
      expect(prefixed.find((r) => r.containerId === 'c2')).toMatchObject({ state: 'healthy' });
      // EC2 unreachable: the error is kept, nothing is judged by it
      const down = await readCiliumCloud(book, { ec2Endpoint: 'http://127.0.0.1:1' });
      expect(down).toEqual({ enis: {}, error: expect.stringMatching(/ECONNREFUSED|connect/) });
      expect(joinNode(sources(down)).every((r) => r.state === 'healthy')).toBe(true);
      // a book that names no ENI: EC2 is not asked
      expect(await readCiliumCloud([{ ...book[0]!, eniId: '' }], { ec2Endpoint: 'http://127.0.0.1:1' })).toBeUndefined();
    } finally {
      await moto.stop();
    }
  }, 120_000);
});
