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
  Container,
  deleteAllNamespaces,
  diffSnapshots,
  hostLocalLeases,
  linkCounters,
  macvlanChain,
  macvlanNode,
  MacvlanNode,
  Netns,
  noPing,
  ping,
  podmanEnv,
  PodmanEnv,
  routeGet,
  snapshot,
  writeConflist,
} from '../lib';

describe('reference macvlan + host-local via podman, as a second network (net1)', () => {
  let topo: MacvlanNode;
  let env: PodmanEnv;
  let before: Awaited<ReturnType<typeof snapshot>>;
  const containers: Container[] = [];

  beforeAll(async () => {
    env = await podmanEnv();
    topo = await macvlanNode({ ipv6: false });
    writeConflist(
      env.confDir,
      bridgeChain({ name: 'ref-ovl', bridge: 'cni-ovl0', subnet: '10.90.0.0/24', dataDir: env.ipamDir, defaultRoute: false }),
    );
    writeConflist(env.confDir, macvlanChain({ name: 'ref-mv', segment: topo.segments[0]!, dataDir: env.ipamDir }));
    await addBridge(topo.node, 'cni-ovl0', '10.90.0.1/24');
    before = await snapshot(topo.node);
  });

  afterAll(async () => {
    for (const c of containers) await c.remove();
    await deleteAllNamespaces();
  });

  it('a container gets eth0 (bridge) and net1 (macvlan); traffic takes the right NIC', async () => {
    const s = topo.segments[0]!;
    const a = await env.start(['ref-ovl', 'ref-mv:interface_name=net1'], { node: topo.node });
    const b = await env.start(['ref-ovl', 'ref-mv:interface_name=net1'], { node: topo.node });
    containers.push(a, b);
    const addrOf = async (c: Container, dev: string) => /inet (\S+)\//.exec(await c.execOk(['ip', '-4', '-o', 'addr', 'show', dev]))![1]!;
    expect(await addrOf(a, 'eth0')).toMatch(/^10\.90\.0\./);
    const aNet1 = await addrOf(a, 'net1');
    const bNet1 = await addrOf(b, 'net1');
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
    for (const c of containers.splice(0)) expect((await c.remove()).code).toBe(0);
    expect(diffSnapshots(before, await snapshot(topo.node))).toEqual([]);
    expect(hostLocalLeases(env.ipamDir, 'ref-mv')).toEqual([]);
    expect(hostLocalLeases(env.ipamDir, 'ref-ovl')).toEqual([]);
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
