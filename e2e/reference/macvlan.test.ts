/**
 * Debian's macvlan + host-local as a secondary network, attached by podman with two --network
 * flags (the way Multus adds net1): eth0 from bridge (the "overlay"), net1 from macvlan whose parent
 * is the node's uplink. Also the negative control the `veth` plugin exists for: a macvlan pod cannot
 * reach its own node's address on the parent link.
 */
import {
  addBridge,
  bridgeChain,
  CniDirs,
  cnitool,
  cnitoolOk,
  deleteAllNamespaces,
  diffSnapshots,
  linkCounters,
  macvlanChain,
  macvlanNode,
  MacvlanNode,
  Netns,
  noPing,
  ping,
  NetSnapshot,
  podmanSuite,
  routeGet,
  snapshot,
} from '../lib';

describe('reference macvlan + host-local via podman, as a second network (net1)', () => {
  const pm = podmanSuite();
  let topo: MacvlanNode;
  let before: NetSnapshot;

  beforeAll(async () => {
    topo = await macvlanNode({ ipv6: false });
    pm.env.writeConflist(
      bridgeChain({ name: 'ref-ovl', bridge: 'cni-ovl0', subnet: '10.90.0.0/24', dataDir: pm.env.ipamDir, defaultRoute: false }),
    );
    pm.env.writeConflist(macvlanChain({ name: 'ref-mv', segment: topo.segments[0]!, dataDir: pm.env.ipamDir }));
    await addBridge(topo.node, 'cni-ovl0', '10.90.0.1/24');
    before = await snapshot(topo.node);
  });

  it('a container gets eth0 (bridge) and net1 (macvlan); traffic takes the right NIC', async () => {
    const s = topo.segments[0]!;
    const a = await pm.start(['ref-ovl', 'ref-mv:interface_name=net1'], { node: topo.node });
    const b = await pm.start(['ref-ovl', 'ref-mv:interface_name=net1'], { node: topo.node });
    expect(await a.ipv4('eth0')).toMatch(/^10\.90\.0\./);
    const aNet1 = await a.ipv4('net1');
    const bNet1 = await b.ipv4('net1');
    expect(aNet1).toMatch(/^172\.16\.50\.1\d\d$/);
    expect(await routeGet(a.netns, s.extIP4)).toMatchObject({ dev: 'net1' });
    expect(await routeGet(a.netns, '10.90.0.1')).toMatchObject({ dev: 'eth0' });

    const net1Before = await linkCounters(a.netns, 'net1');
    await ping(a, s.extIP4); // north-south: macvlan to the external host
    expect((await linkCounters(a.netns, 'net1')).txPackets).toBeGreaterThan(net1Before.txPackets);
    await ping(a, bNet1); // macvlan bridge mode: pods on one parent reach each other
    await ping(a, '10.90.0.1'); // the node over the bridge network
    await ping(topo.ext, aNet1);
    // the macvlan limitation the `veth` plugin fixes: no path to the parent's own address
    await noPing(a, s.nodeIP4);
  });

  it('removing the containers releases every address and leaves nothing on the node', async () => {
    await pm.removeAll();
    expect(diffSnapshots(before, await snapshot(topo.node))).toEqual([]);
    expect(pm.env.leases('ref-mv')).toEqual([]);
    expect(pm.env.leases('ref-ovl')).toEqual([]);
  });
});

describe('reference macvlan + host-local via cnitool', () => {
  let topo: MacvlanNode;
  let dirs: CniDirs;
  let pod: Netns;

  beforeAll(async () => {
    topo = await macvlanNode();
    dirs = new CniDirs();
    dirs.writeConflist(macvlanChain({ name: 'ref-mv-ds', segment: topo.segments[0]!, dataDir: dirs.ipamDir, ipv6: true }));
    pod = await Netns.create('pod');
  });

  afterAll(async () => {
    await cnitool('del', 'ref-mv-ds', pod.path, { node: topo.node, confDir: dirs.confDir });
    await deleteAllNamespaces();
    dirs.remove();
  });

  it('dual-stack ADD, traffic to the external host over IPv4 and IPv6, DEL without leftovers', async () => {
    const s = topo.segments[0]!;
    const before = await snapshot(topo.node);
    const r = await cnitoolOk('add', 'ref-mv-ds', pod.path, { node: topo.node, confDir: dirs.confDir });
    const ips = (r.json.ips as { address: string }[]).map((i) => i.address.split('/')[0]!);
    expect(ips).toHaveLength(2);
    await ping(pod, s.extIP4);
    await ping(pod, s.extIP6);
    await noPing(pod, s.nodeIP4);
    await cnitoolOk('del', 'ref-mv-ds', pod.path, { node: topo.node, confDir: dirs.confDir });
    expect(diffSnapshots(before, await snapshot(topo.node, ips))).toEqual([]);
    expect(dirs.leases('ref-mv-ds')).toEqual([]);
  });
});
