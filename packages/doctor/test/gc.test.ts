// doctor node --gc, the plan: which objects of which sandboxes a DEL, a GC or a host-local release reclaims, and
// that nothing of a ready, stopped or being-created sandbox is planned. Applying it runs in the node tier
// (e2e/node/coil.test.ts) against containerd, Multus and the plugins.
import { formatGc, planGc, validAttachments } from '../src/node/gc';
import type { NodeSources } from '../src/node/join';
import { attachmentKey } from '@cnikit/router/marks';
import type { CachedAttachment, CiliumLease, Sandbox } from '../src/node/sources';

const chain = {
  cniVersion: '1.0.0',
  name: 'macvlan-veth',
  plugins: [{ type: 'macvlan', ipam: { type: 'host-local', ranges: [[{ subnet: '10.9.0.0/24' }]] } }, { type: 'veth' }],
};
const cached = (containerId: string, ip: string): CachedAttachment => ({
  file: `/var/lib/cni/results/macvlan-veth-${containerId}-net1`,
  network: 'macvlan-veth',
  containerId,
  ifName: 'net1',
  plugins: ['macvlan', 'veth'],
  ipam: ['host-local'],
  ips: [ip],
  entry: { kind: 'cniCacheV1', config: Buffer.from(JSON.stringify(chain)).toString('base64') },
});
const sandbox = (id: string, state: 'ready' | 'stopped' | 'creating'): Sandbox => ({
  id,
  namespace: 'default',
  name: state === 'creating' ? '' : id,
  uid: id,
  ready: state === 'ready',
  creating: state === 'creating',
});
const held = (id: string, ip: string) => ({
  lease: { network: 'macvlan-veth', ip, containerId: id, ifName: 'net1' },
  veth: { name: `veth${id}`, network: 'macvlan-veth', containerId: id },
});

const node: NodeSources = {
  sandboxes: [sandbox('live', 'ready'), sandbox('stopped', 'stopped'), sandbox('new', 'creating')],
  // live, stopped and new hold everything; gone1 left a cached attachment, gone2 objects without one
  cached: [cached('live', '10.9.0.2'), cached('stopped', '10.9.0.3'), cached('new', '10.9.0.4'), cached('gone1', '10.9.0.5')],
  leases: ['live', 'stopped', 'new', 'gone1', 'gone2'].map((id, i) => held(id, `10.9.0.${i + 2}`).lease),
  veths: ['live', 'stopped', 'new', 'gone1', 'gone2'].map((id, i) => held(id, `10.9.0.${i + 2}`).veth),
  coil: [],
  router: [],
  terway: [],
};

test("a cached attachment of a gone sandbox gets libcni's DEL; objects no cache entry covers get GC and a host-local release", () => {
  const steps = planGc(node);
  expect(steps.map((s) => [s.step, s.network, s.target])).toEqual([
    ['del', 'macvlan-veth', 'gone1'],
    ['gc', 'macvlan-veth', 'macvlan, veth'],
    ['release', 'macvlan-veth', 'gone2'],
  ]);
  expect(steps[2]!.what).toBe('host-local DEL of 10.9.0.6 (net1)');
  expect(formatGc({ applied: false, steps, before: [], after: [] })).toMatch(/^STEP +NETWORK +TARGET +ACTION\ndel /);
});

test('nothing is planned for ready, stopped or being-created sandboxes', () => {
  const keep = new Set(['live', 'stopped', 'new']);
  const only: NodeSources = {
    ...node,
    cached: node.cached.filter((a) => keep.has(a.containerId)),
    leases: node.leases.filter((l) => keep.has(l.containerId)),
    veths: node.veths.filter((v) => keep.has(v.containerId)),
  };
  expect(planGc(only)).toEqual([]);
  expect(formatGc({ applied: false, steps: [], before: [], after: [] })).toBe(
    'nothing to reclaim\ndry run: 0 objects of 0 gone sandboxes; --apply reclaims them\n',
  );
});

test('without a config of the network on the node, the leftovers are named and kept', () => {
  const steps = planGc({ ...node, cached: [] });
  expect(steps.map((s) => s.what)).toEqual([
    'no config of macvlan-veth on the node: what it left stays',
    'no host-local config of macvlan-veth on the node: 10.9.0.5 stays',
    'no host-local config of macvlan-veth on the node: 10.9.0.6 stays',
  ]);
});

test('a Coil pod of a gone sandbox without a cache entry: GC of every network whose chain has coil (coild knows it by container)', () => {
  const coilNet = { cniVersion: '1.1.0', name: 'k8s-pod-network', plugins: [{ type: 'coil', socket: '/run/coild.sock' }] };
  const live: CachedAttachment = {
    file: 'k8s-pod-network-live-eth0',
    network: 'k8s-pod-network',
    containerId: 'live',
    ifName: 'eth0',
    plugins: ['coil'],
    ipam: [],
    ips: ['10.1.0.2'],
    entry: { config: Buffer.from(JSON.stringify(coilNet)).toString('base64') },
  };
  const veth = (id: string, ip: string) => ({ name: `veth${id}`, pool: 'default', containerId: id, ifName: 'eth0', ips: [ip] });
  const s: NodeSources = {
    sandboxes: [sandbox('live', 'ready')],
    cached: [live],
    leases: [],
    veths: [],
    coil: [veth('live', '10.1.0.2')],
    router: [],
    terway: [],
  };
  expect(planGc(s)).toEqual([]);
  expect(planGc({ ...s, coil: [...s.coil, veth('gone', '10.1.0.9')] }).map((x) => [x.step, x.network, x.target])).toEqual([
    ['gc', 'k8s-pod-network', 'coil'],
  ]);
});

test("router host routes no cache entry covers: GC of the network whose tag is in the route's key; a live pod's route keeps nothing planned", () => {
  const routerNet = { cniVersion: '1.0.0', name: 'macvlan-router', plugins: [{ type: 'macvlan' }, { type: 'router' }] };
  const live: CachedAttachment = {
    file: 'macvlan-router-live-net1',
    network: 'macvlan-router',
    containerId: 'live',
    ifName: 'net1',
    plugins: ['macvlan', 'router'],
    ipam: [],
    ips: ['10.9.0.2'],
    entry: { config: Buffer.from(JSON.stringify(routerNet)).toString('base64') },
  };
  const route = (id: string, ip: string) => ({ ip, table: 254, link: 'vethx', key: attachmentKey('macvlan-router', id, 'net1') });
  const s: NodeSources = {
    sandboxes: [sandbox('live', 'ready')],
    cached: [live],
    leases: [],
    veths: [],
    coil: [],
    router: [route('live', '10.9.0.2')],
    terway: [],
  };
  expect(planGc(s)).toEqual([]);
  // a pod gone without a cache entry: its key resolves to no sandbox the node knows, its network by the key's tag
  expect(planGc({ ...s, router: [...s.router, route('gone', '10.9.0.7')] }).map((x) => [x.step, x.network, x.target])).toEqual([
    ['gc', 'macvlan-router', 'macvlan, router'],
  ]);
  // a route of a network the node has no config of: named, kept
  const stray = { ip: '10.9.0.8', table: 254, link: 'vethx', key: attachmentKey('elsewhere', 'gone', 'net1') };
  expect(planGc({ ...s, router: [stray] }).map((x) => x.what)).toEqual([
    `no config of (the router network of key ${stray.key}) on the node: what it left stays`,
  ]);
});

test("a gcp-ipam record of a gone sandbox plans the GC of its network (under ptp, its IPAM's); a live pod's plans nothing", () => {
  const gke = {
    cniVersion: '1.0.0',
    name: 'k8s-pod-network',
    plugins: [{ type: 'ptp', ipam: { type: 'gcp-ipam', pool: 'ippool-default' } }, { type: 'portmap' }],
  };
  const live: CachedAttachment = {
    file: 'k8s-pod-network-live-eth0',
    network: 'k8s-pod-network',
    containerId: 'live',
    ifName: 'eth0',
    plugins: ['ptp', 'portmap'],
    ipam: ['gcp-ipam'],
    ips: ['10.1.0.2'],
    entry: { config: Buffer.from(JSON.stringify(gke)).toString('base64') },
  };
  const rec = (id: string, ip: string) => ({ network: 'k8s-pod-network', ip, containerId: id, ifName: 'eth0', allocation: `p.${ip}` });
  const s: NodeSources = {
    sandboxes: [sandbox('live', 'ready')],
    cached: [live],
    leases: [],
    veths: [],
    coil: [],
    router: [],
    terway: [],
    gcp: [rec('live', '10.1.0.2')],
  };
  expect(planGc(s)).toEqual([]);
  const steps = planGc({ ...s, gcp: [...s.gcp!, rec('gone', '10.1.0.9')] });
  expect(steps.map((x) => [x.step, x.network, x.target])).toEqual([['gc', 'k8s-pod-network', 'ptp, portmap']]);
  expect(steps[0]!.what).toBe("GC of k8s-pod-network's plugins (or their IPAM) that speak CNI 1.1.0");
});

describe("cilium-eni-agent's leases", () => {
  const eniNet = { cniVersion: '1.1.0', name: 'aws-eni', plugins: [{ type: 'ptp', ipam: { type: 'cilium-eni-ipam' } }] };
  const cachedEni = (containerId: string, ip: string, network = 'aws-eni', ifName = 'eth0'): CachedAttachment => ({
    file: `${network}-${containerId}-${ifName}`,
    network,
    containerId,
    ifName,
    plugins: ['ptp'],
    ipam: ['cilium-eni-ipam'],
    ips: [ip],
    entry: { config: Buffer.from(JSON.stringify({ ...eniNet, name: network })).toString('base64') },
  });
  const lease = (containerId: string, ip: string, ifName = 'eth0'): CiliumLease => ({ ip, containerId, ifName, eniId: 'eni-1' });
  const s: NodeSources = {
    sandboxes: [sandbox('live', 'ready')],
    cached: [cachedEni('live', '10.0.64.10')],
    leases: [],
    veths: [],
    coil: [],
    router: [],
    terway: [],
    cilium: [lease('live', '10.0.64.10')],
  };
  const plan = (x: NodeSources) => planGc(x).map((step) => [step.step, step.network, step.target]);

  test('a lease of a gone sandbox no cache entry covers plans the GC of the networks whose IPAM is cilium-eni-ipam; a cached one, its DEL', () => {
    expect(planGc(s)).toEqual([]);
    expect(plan({ ...s, cilium: [...s.cilium!, lease('gone', '10.0.64.11')] })).toEqual([['gc', 'aws-eni', 'ptp']]);
    // the agent knows owners, not networks: every network using it on the node
    const two = { ...s, cached: [...s.cached, cachedEni('live', '10.0.65.10', 'eni-secondary', 'net1')] };
    expect(plan({ ...two, cilium: [...s.cilium!, lease('gone', '10.0.64.11', 'net1')] })).toEqual([
      ['gc', 'aws-eni', 'ptp'],
      ['gc', 'eni-secondary', 'ptp'],
    ]);
    // a cache entry of the attachment covers it: its DEL releases the IP
    expect(
      plan({ ...s, cached: [...s.cached, cachedEni('gone', '10.0.64.11')], cilium: [...s.cilium!, lease('gone', '10.0.64.11')] }),
    ).toEqual([['del', 'aws-eni', 'gone']]);
  });

  test('without a config of a cilium-eni-ipam network on the node, the lease is named and kept', () => {
    expect(planGc({ ...s, cached: [], cilium: [lease('gone', '10.0.64.11')] }).map((x) => [x.step, x.network, x.what])).toEqual([
      ['gc', '(a cilium-eni-ipam network)', 'no config of (a cilium-eni-ipam network) on the node: what it left stays'],
    ]);
  });

  test("GC's valid attachments: each sandbox the runtime knows with every ifname of the agent's leases and of cilium-eni-ipam networks", () => {
    const node: NodeSources = {
      ...s,
      sandboxes: [sandbox('live', 'ready'), sandbox('new', 'creating')],
      cached: [...s.cached, cachedEni('live', '10.0.65.10', 'eni-secondary', 'net2')],
      cilium: [lease('live', '10.0.64.10'), lease('new', '10.0.64.12', 'net1')],
    };
    const pairs = (net: Parameters<typeof validAttachments>[1]) => validAttachments(node, net).map((a) => `${a.containerID}/${a.ifname}`);
    // the agent's GC frees every owner not listed, whatever its network: all of them are listed
    expect(pairs(eniNet)).toEqual(['live/eth0', 'live/net1', 'live/net2', 'new/eth0', 'new/net1', 'new/net2']);
    // a network that does not use it: its own ifnames only (eth0 when it has none)
    expect(pairs({ name: 'macvlan-veth', plugins: [{ type: 'macvlan' }] })).toEqual(['live/eth0', 'new/eth0']);
  });
});

describe("terwayd's leases", () => {
  const terwayNet = { cniVersion: '1.1.0', name: 'terway', plugins: [{ type: 'terway' }] };
  const cachedPod = (containerId: string, ip: string): CachedAttachment => ({
    file: `terway-${containerId}-eth0`,
    network: 'terway',
    containerId,
    ifName: 'eth0',
    plugins: ['terway'],
    ipam: [],
    ips: [ip],
    entry: { config: Buffer.from(JSON.stringify(terwayNet)).toString('base64') },
  });
  const lease = (containerId: string, ip: string) => ({ ip, eniId: 'eni-1', containerId });
  const s: NodeSources = {
    sandboxes: [sandbox('live', 'ready'), sandbox('new', 'creating')],
    cached: [cachedPod('live', '172.20.0.10')],
    leases: [],
    veths: [],
    coil: [],
    router: [],
    terway: [lease('live', '172.20.0.10'), lease('new', '172.20.0.12')],
  };
  const plan = (x: NodeSources) => planGc(x).map((step) => [step.step, step.network, step.target]);

  test('a lease of a gone sandbox no cache entry covers plans the GC of the networks with terway; a cached one, its DEL', () => {
    expect(planGc(s)).toEqual([]);
    expect(plan({ ...s, terway: [...s.terway, lease('gone', '172.20.0.11')] })).toEqual([['gc', 'terway', 'terway']]);
    expect(
      plan({ ...s, cached: [...s.cached, cachedPod('gone', '172.20.0.11')], terway: [...s.terway, lease('gone', '172.20.0.11')] }),
    ).toEqual([['del', 'terway', 'gone']]);
    expect(planGc({ ...s, cached: [], terway: [lease('gone', '172.20.0.11')] }).map((x) => x.what)).toEqual([
      'no config of (a terway network) on the node: what it left stays',
    ]);
    // the pod being created keeps its lease: GC lists its sandbox
    expect(validAttachments(s, terwayNet).map((a) => a.containerID)).toEqual(['live', 'new']);
  });
});
