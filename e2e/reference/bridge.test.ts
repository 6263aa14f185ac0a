/**
 * Proves the harness with Debian's Go reference plugins only: bridge + host-local driven by
 * cnitool and by podman, each in its own node namespace, with real traffic and leak checks.
 */
import {
  addBridge,
  bridgeChain,
  bridgeNode,
  BridgeNode,
  CniDirs,
  cnitool,
  cnitoolOk,
  deleteAllNamespaces,
  diffSnapshots,
  enableForwarding,
  Netns,
  ping,
  NetSnapshot,
  podmanSuite,
  snapshot,
} from '../lib';

const SUBNET = '10.88.0.0/24';
const GATEWAY = '10.88.0.1';

describe('reference bridge + host-local via cnitool', () => {
  let topo: BridgeNode;
  let dirs: CniDirs;
  let pods: Netns[];
  const podIPs: string[] = [];
  let before: NetSnapshot;

  beforeAll(async () => {
    topo = await bridgeNode();
    dirs = new CniDirs();
    dirs.writeConflist(bridgeChain({ name: 'ref-br', bridge: 'cni0', subnet: SUBNET, dataDir: dirs.ipamDir }));
    // the bridge plugin never deletes its bridge: create it (with the gateway address) up front so
    // that a before/after comparison of the node shows only what the attachments leave behind
    await addBridge(topo.node, 'cni0', `${GATEWAY}/24`);
    await enableForwarding(topo.node);
    await topo.ext.ip('route', 'add', SUBNET, 'via', topo.nodeUplinkIP4);
    pods = [await Netns.create('pod'), await Netns.create('pod')];
    before = await snapshot(topo.node);
  });

  afterAll(async () => {
    for (const p of pods ?? []) await cnitool('del', 'ref-br', p.path, { node: topo.node, confDir: dirs.confDir });
    await deleteAllNamespaces();
    dirs?.remove();
  });

  it('ADD attaches each pod to the bridge with a host-local address', async () => {
    for (const pod of pods) {
      const r = await cnitoolOk('add', 'ref-br', pod.path, { node: topo.node, confDir: dirs.confDir });
      expect(r.json.cniVersion).toBe('1.0.0');
      const ip = String(r.json.ips[0].address).split('/')[0]!;
      expect(ip).toMatch(/^10\.88\.0\.\d+$/);
      podIPs.push(ip);
      const eth0 = await pod.ipJson<{ addr_info: { local: string }[] }>('addr', 'show', 'dev', 'eth0');
      expect(eth0[0]!.addr_info.map((a) => a.local)).toContain(ip);
    }
    expect(dirs.leases('ref-br').sort()).toEqual([...podIPs].sort());
  });

  it('pods reach the node (gateway), each other, and an external host routed by the node', async () => {
    await ping(pods[0]!, GATEWAY);
    await ping(pods[0]!, podIPs[1]!);
    await ping(pods[1]!, topo.extIP4);
    await ping(topo.node, podIPs[0]!);
    await ping(topo.ext, podIPs[1]!);
  });

  it('CHECK passes while everything is in place', async () => {
    for (const pod of pods) await cnitoolOk('check', 'ref-br', pod.path, { node: topo.node, confDir: dirs.confDir });
  });

  it('DEL removes the host veths and releases the leases; DEL is idempotent', async () => {
    for (const pod of pods) {
      await cnitoolOk('del', 'ref-br', pod.path, { node: topo.node, confDir: dirs.confDir });
      await cnitoolOk('del', 'ref-br', pod.path, { node: topo.node, confDir: dirs.confDir });
    }
    expect(diffSnapshots(before, await snapshot(topo.node, podIPs))).toEqual([]);
    expect(dirs.leases('ref-br')).toEqual([]);
  });
});

describe('reference bridge + host-local via podman', () => {
  const pm = podmanSuite();
  let topo: BridgeNode;
  let before: NetSnapshot;

  beforeAll(async () => {
    topo = await bridgeNode();
    pm.env.writeConflist(bridgeChain({ name: 'ref-pm-br', bridge: 'cni1', subnet: '10.89.0.0/24', dataDir: pm.env.ipamDir }));
    await addBridge(topo.node, 'cni1', '10.89.0.1/24');
    before = await snapshot(topo.node);
  });

  it('podman run --rm: the container gets an address and reaches the node', async () => {
    const r = await pm.env.run(['ref-pm-br'], ['sh', '-c', 'ip -4 -o addr show eth0 && ip route && ping -c 2 -W 1 10.89.0.1'], {
      node: topo.node,
    });
    expect(r.stderr + r.stdout).toMatch(/inet 10\.89\.0\.\d+\/24/);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/default via 10\.89\.0\.1 dev eth0/);
  });

  it('a running container and the node reach each other; removal leaves nothing on the node', async () => {
    const c = await pm.start(['ref-pm-br'], { node: topo.node });
    const ip = await c.ipv4('eth0');
    expect(ip).toMatch(/^10\.89\.0\.\d+$/);
    await ping(c, '10.89.0.1');
    await ping(topo.node, ip);
    // the host side of the attachment lives in the node namespace, not in the machine's
    const hostVeths = (
      await topo.node.ipJson<{ ifname: string; linkinfo?: { info_kind?: string } }>('-d', 'link', 'show', 'type', 'veth')
    ).map((l) => l.ifname);
    expect(hostVeths.filter((n) => n !== 'uplink0')).toHaveLength(1);
    await pm.remove(c);
    expect(diffSnapshots(before, await snapshot(topo.node, [ip]))).toEqual([]);
    expect(await c.netns.exists()).toBe(false);
  });
});
