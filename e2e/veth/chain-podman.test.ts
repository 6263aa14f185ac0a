/**
 * `veth` chained after macvlan + host-local with a real CNI runtime: podman (libcni) running in the
 * node namespace. One NIC (eth0 = macvlan + veth), then two (eth0 and net1, each macvlan + veth),
 * where the seed moves net1's routes to table 100 behind an `ip rule from <net1 IP>`.
 */
import {
  diffSnapshots,
  linkCounters,
  macvlanNode,
  MacvlanNode,
  NetSnapshot,
  ping,
  podmanSuite,
  PodmanSuite,
  routeGet,
  rules,
  snapshot,
} from '../lib';
import { describeVeth, vethChain } from './helpers';

interface PodmanVethNode {
  pm: PodmanSuite;
  topo: MacvlanNode;
  before: NetSnapshot;
}

/**
 * For a describe block: a node with `segments` uplinks, network pm-mv-veth-<i> (macvlan + host-local +
 * veth) on uplink i, and the node's snapshot once they are written. The fields are set in beforeAll.
 */
function podmanVethNode(segments: number): PodmanVethNode {
  const f = { pm: podmanSuite() } as PodmanVethNode;
  beforeAll(async () => {
    f.topo = await macvlanNode({ ipv6: false, segments });
    const { ipamDir } = f.pm.env;
    for (let i = 0; i < segments; i++) {
      f.pm.env.writeConflist(
        vethChain(f.topo, { name: `pm-mv-veth-${i}`, segment: i, dataDir: ipamDir, logFile: `${ipamDir}/../veth.log` }),
      );
    }
    f.before = await snapshot(f.topo.node);
  });
  return f;
}

describeVeth('veth after macvlan + host-local via podman (one NIC)', () => {
  const NET = 'pm-mv-veth-0';
  const f = podmanVethNode(1);

  it('podman run --rm: the container reaches node IP and Service over veth0, its default route stays on eth0', async () => {
    const { pm, topo, before } = f;
    const s = topo.segments[0]!;
    const script = [
      'set -e',
      'ip route',
      `ip route show default | grep -q "via ${s.extIP4} dev eth0"`,
      `ip route get ${s.nodeIP4} | grep -q "dev veth0"`,
      `ip route get ${topo.serviceIP4} | grep -q "dev veth0"`,
      `ping -c 1 -W 2 ${s.nodeIP4}`,
      `ping -c 1 -W 2 ${topo.serviceIP4}`,
      `ping -c 1 -W 2 ${s.extIP4}`,
    ].join('\n');
    const r = await pm.env.run([NET], ['sh', '-c', script], { node: topo.node });
    if (r.code !== 0) throw new Error(`container script failed (exit ${r.code}):\n${r.stdout}${r.stderr}`);
    expect(diffSnapshots(before, await snapshot(topo.node))).toEqual([]); // --rm: podman ran DEL
  });

  it('a running container: traffic both ways; removal (CNI DEL by podman) leaves nothing on the node', async () => {
    const { pm, topo, before } = f;
    const s = topo.segments[0]!;
    const c = await pm.start([NET], { node: topo.node });
    const ip = await c.ipv4('eth0');
    expect(await routeGet(c.netns, s.nodeIP4)).toMatchObject({ dev: 'veth0' });
    const v0 = await linkCounters(c.netns, 'veth0');
    await ping(c, s.nodeIP4);
    await ping(c, topo.serviceIP4);
    expect((await linkCounters(c.netns, 'veth0')).txPackets - v0.txPackets).toBeGreaterThanOrEqual(2);
    await ping(topo.node, ip);
    await ping(topo.ext, ip);

    await pm.remove(c);
    expect(diffSnapshots(before, await snapshot(topo.node, [ip]))).toEqual([]);
    expect(pm.env.leases(NET)).toEqual([]);
  });
});

describeVeth('veth after macvlan + host-local via podman (two NICs: eth0 and net1)', () => {
  const f = podmanVethNode(2);

  it('net1 routes move to table 100 behind a from-rule; eth0 keeps the main default; both NICs carry traffic', async () => {
    const { pm, topo, before } = f;
    const [s0, s1] = [topo.segments[0]!, topo.segments[1]!];
    const c = await pm.start(['pm-mv-veth-0', 'pm-mv-veth-1:interface_name=net1'], { node: topo.node });
    const ip0 = await c.ipv4('eth0');
    const ip1 = await c.ipv4('net1');

    const mainDefault = await c.netns.ipJson<{ dev: string; gateway?: string }>('route', 'show', 'default');
    expect(mainDefault).toEqual([expect.objectContaining({ dev: 'eth0', gateway: s0.extIP4 })]);
    expect(await rules(c.netns)).toContainEqual(
      expect.stringMatching(new RegExp(`^-4 \\d+: from ${ip1.replace(/\./g, '\\.')}(/32)? lookup 100$`)),
    );
    const t100 = await c.netns.ipJson<{ dst: string; dev: string; gateway?: string }>('route', 'show', 'table', '100');
    expect(t100).toContainEqual(expect.objectContaining({ dst: 'default', dev: 'net1', gateway: s1.extIP4 }));
    expect(await routeGet(c.netns, '192.168.200.1', ip1)).toMatchObject({ dev: 'net1' });

    await ping(c, s0.extIP4);
    await ping(c, s1.extIP4, { from: ip1 });
    await ping(c, s0.nodeIP4);
    await ping(c, topo.serviceIP4);
    await ping(topo.node, ip0);

    await pm.remove(c);
    expect(diffSnapshots(before, await snapshot(topo.node, [ip0, ip1]))).toEqual([]);
  });
});
