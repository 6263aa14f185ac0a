/**
 * `veth` chained after macvlan + host-local with a real CNI runtime: podman (libcni) running in the
 * node namespace. One NIC (eth0 = macvlan + veth), then two (eth0 and net1, each macvlan + veth),
 * where the seed moves net1's routes to table 100 behind an `ip rule from <net1 IP>`.
 */
import {
  Container,
  deleteAllNamespaces,
  describeWithPlugin,
  diffSnapshots,
  hostLocalLeases,
  linkCounters,
  macvlanChain,
  macvlanNode,
  MacvlanNode,
  NetSnapshot,
  ping,
  podmanEnv,
  PodmanEnv,
  routeGet,
  rules,
  snapshot,
  writeConflist,
} from '../lib';
import { vethConf } from './helpers';

const describeVeth = describeWithPlugin('veth');

describeVeth('veth after macvlan + host-local via podman (one NIC)', () => {
  const NET = 'pm-mv-veth';
  let topo: MacvlanNode;
  let env: PodmanEnv;
  let before: NetSnapshot;
  const containers: Container[] = [];

  beforeAll(async () => {
    env = await podmanEnv();
    topo = await macvlanNode({ ipv6: false });
    writeConflist(
      env.confDir,
      macvlanChain({
        name: NET,
        segment: topo.segments[0]!,
        dataDir: env.ipamDir,
        veth: vethConf(topo, { logFile: `${env.ipamDir}/../veth.log` }),
      }),
    );
    before = await snapshot(topo.node);
  });

  afterAll(async () => {
    for (const c of containers) await c.remove();
    await deleteAllNamespaces();
  });

  it('podman run --rm: the container reaches node IP and Service over veth0, its default route stays on eth0', async () => {
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
    const r = await env.run([NET], ['sh', '-c', script], { node: topo.node });
    if (r.code !== 0) throw new Error(`container script failed (exit ${r.code}):\n${r.stdout}${r.stderr}`);
    expect(diffSnapshots(before, await snapshot(topo.node))).toEqual([]); // --rm: podman ran DEL
  });

  it('a running container: traffic both ways; removal (CNI DEL by podman) leaves nothing on the node', async () => {
    const s = topo.segments[0]!;
    const c = await env.start([NET], { node: topo.node });
    containers.push(c);
    const ip = /inet (\S+)\//.exec(await c.execOk(['ip', '-4', '-o', 'addr', 'show', 'eth0']))![1]!;
    expect(await routeGet(c.netns, s.nodeIP4)).toMatchObject({ dev: 'veth0' });
    const v0 = await linkCounters(c.netns, 'veth0');
    await ping(c, s.nodeIP4);
    await ping(c, topo.serviceIP4);
    expect((await linkCounters(c.netns, 'veth0')).txPackets - v0.txPackets).toBeGreaterThanOrEqual(2);
    await ping(topo.node, ip);
    await ping(topo.ext, ip);

    const rm = await c.remove();
    containers.pop();
    expect(rm.code).toBe(0);
    expect(diffSnapshots(before, await snapshot(topo.node, [ip]))).toEqual([]);
    expect(hostLocalLeases(env.ipamDir, NET)).toEqual([]);
  });
});

describeVeth('veth after macvlan + host-local via podman (two NICs: eth0 and net1)', () => {
  let topo: MacvlanNode;
  let env: PodmanEnv;
  let before: NetSnapshot;
  const containers: Container[] = [];

  beforeAll(async () => {
    env = await podmanEnv();
    topo = await macvlanNode({ ipv6: false, segments: 2 });
    for (const i of [0, 1]) {
      writeConflist(
        env.confDir,
        macvlanChain({
          name: `pm-mv-veth-${i}`,
          segment: topo.segments[i]!,
          dataDir: env.ipamDir,
          veth: vethConf(topo, { logFile: `${env.ipamDir}/../veth.log` }),
        }),
      );
    }
    before = await snapshot(topo.node);
  });

  afterAll(async () => {
    for (const c of containers) await c.remove();
    await deleteAllNamespaces();
  });

  it('net1 routes move to table 100 behind a from-rule; eth0 keeps the main default; both NICs carry traffic', async () => {
    const [s0, s1] = [topo.segments[0]!, topo.segments[1]!];
    const c = await env.start(['pm-mv-veth-0', 'pm-mv-veth-1:interface_name=net1'], { node: topo.node });
    containers.push(c);
    const addr = async (dev: string) => /inet (\S+)\//.exec(await c.execOk(['ip', '-4', '-o', 'addr', 'show', dev]))![1]!;
    const ip0 = await addr('eth0');
    const ip1 = await addr('net1');

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

    const rm = await c.remove();
    containers.pop();
    expect(rm.code).toBe(0);
    expect(diffSnapshots(before, await snapshot(topo.node, [ip0, ip1]))).toEqual([]);
  });
});
