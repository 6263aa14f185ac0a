/**
 * `router` (dist/bin/router) chained after Debian's macvlan + host-local on a pod whose eth0 comes from
 * an "overlay" (Debian's bridge plugin), both attached with cnitool inside a node namespace, the way
 * Multus attaches a pod's cluster network and then its secondary network. Checked with real traffic,
 * IPv4 and IPv6:
 *  - the pod reaches another overlay pod through eth0, with its overlay address as source;
 *  - it reaches an external host through net1 (macvlan), which sees net1's address as source;
 *  - it reaches its node (macvlan alone cannot: the parent is isolated) and a Service address;
 *  - the node reaches net1's address;
 *  - CHECK passes; DEL leaves no rule, route or neighbour of the attachment on the node, and the
 *    pod's routing as the overlay left it; DEL repeats.
 */
import {
  CniDirs,
  cnitool,
  cnitoolOk,
  deleteAllNamespaces,
  diffSnapshots,
  MacvlanNode,
  Netns,
  NetSnapshot,
  ping,
  routeGet,
  snapshot,
} from '../lib';
import { sourceSeenBy } from '../lib/router-traffic';
import { describeRouter, globalAddrs, overlayConflist, routerChain, routerNode } from './helpers';

describeRouter('router after macvlan + host-local, on an overlay pod, via cnitool (dual-stack, CNI 1.0.0)', () => {
  let topo: MacvlanNode;
  let dirs: CniDirs;
  let pod: Netns;
  let pod2: Netns;
  let nodeBefore: NetSnapshot;
  let podBefore: NetSnapshot;
  let addResult: { ips: { address: string }[] };
  const ip: Record<string, string> = {};

  const tool = (cmd: Parameters<typeof cnitool>[0], net: string, p: Netns, ifname: string) =>
    cnitool(cmd, net, p.path, { node: topo.node, confDir: dirs.confDir, ifname });

  beforeAll(async () => {
    topo = await routerNode({ ipv6: true });
    dirs = new CniDirs();
    dirs.writeConflist(overlayConflist('overlay', dirs.ipamDir, { ipv6: true }));
    dirs.writeConflist(routerChain('mv-router', topo, topo.segments[0]!, dirs.ipamDir, `${dirs.logDir}/router.log`, { ipv6: true }));
    pod = await Netns.create('pod');
    pod2 = await Netns.create('pod');
    for (const p of [pod, pod2]) {
      const r = await cnitoolOk('add', 'overlay', p.path, { node: topo.node, confDir: dirs.confDir, ifname: 'eth0' });
      expect(r.json.ips).toHaveLength(2);
    }
    ip.pod4 = globalAddrs(await pod.ipJson('addr', 'show', 'dev', 'eth0'), 'inet')[0]!;
    ip.pod6 = globalAddrs(await pod.ipJson('addr', 'show', 'dev', 'eth0'), 'inet6')[0]!;
    ip.pod2v4 = globalAddrs(await pod2.ipJson('addr', 'show', 'dev', 'eth0'), 'inet')[0]!;
    ip.pod2v6 = globalAddrs(await pod2.ipJson('addr', 'show', 'dev', 'eth0'), 'inet6')[0]!;
    nodeBefore = await snapshot(topo.node);
    podBefore = await snapshot(pod);
  });

  afterAll(async () => {
    if (pod) await tool('del', 'mv-router', pod, 'net1');
    for (const p of [pod, pod2]) if (p) await tool('del', 'overlay', p, 'eth0');
    await deleteAllNamespaces();
    dirs?.remove();
  });

  it('ADD (net1): macvlan result passed through; net1 owns main, eth0 moved to table 99', async () => {
    const r = await cnitoolOk('add', 'mv-router', pod.path, { node: topo.node, confDir: dirs.confDir, ifname: 'net1' });
    addResult = r.json;
    expect(r.json.cniVersion).toBe('1.0.0');
    expect((r.json.interfaces as { name: string }[]).map((i) => i.name)).toEqual(['net1']);
    ip.net4 = r.json.ips.find((x: { address: string }) => !x.address.includes(':')).address.split('/')[0];
    ip.net6 = r.json.ips.find((x: { address: string }) => x.address.includes(':')).address.split('/')[0];
    const s = topo.segments[0]!;
    expect(await routeGet(pod, '192.168.200.1')).toMatchObject({ dev: 'net1', gateway: s.extIP4 });
    expect(await routeGet(pod, ip.pod2v4!)).toMatchObject({ dev: 'eth0', table: '99' });
    expect(await routeGet(pod, s.nodeIP4)).toMatchObject({ dev: 'eth0', table: '99' });
    expect(await routeGet(pod, topo.serviceIP4)).toMatchObject({ dev: 'eth0', table: '99' });
    expect(await routeGet(pod, 'fd00:200::1')).toMatchObject({ dev: 'net1', gateway: s.extIP6 });
    // One default per family in main, through net1: macvlan's ConfigureIface adds its IPv6 default as a sibling of
    // eth0's (one ECMP route), and a route lookup would then pick eth0 or net1 by flow hash.
    for (const f of ['-4', '-6']) {
      const defaults = (await pod.ipJson<{ dst: string; dev?: string; nexthops?: unknown[] }>(f, 'route', 'show', 'default')).map(
        ({ dev, nexthops }) => ({ dev, nexthops }),
      );
      expect(defaults).toEqual([{ dev: 'net1', nexthops: undefined }]);
    }
    expect(await routeGet(pod, s.nodeIP6)).toMatchObject({ dev: 'eth0', table: '99' });
    // The node: /32 and /128 routes to net1's addresses through cni0, in table 500, behind pref 1000.
    const t500 = await topo.node.ipJson<{ dst: string; dev: string; protocol: string }>('route', 'show', 'table', '500');
    expect(t500).toEqual([expect.objectContaining({ dst: ip.net4, dev: 'cni0', protocol: '158' })]);
    const t500v6 = await topo.node.ipJson<{ dst: string; dev: string }>('-6', 'route', 'show', 'table', '500');
    expect(t500v6).toEqual([expect.objectContaining({ dst: ip.net6, dev: 'cni0' })]);
  });

  it('real traffic: overlay and node through eth0, external host through net1 with its own address', async () => {
    const s = topo.segments[0]!;
    await ping(pod, ip.pod2v4!);
    await ping(pod, ip.pod2v6!);
    await ping(pod, s.nodeIP4);
    await ping(pod, s.nodeIP6);
    await ping(pod, topo.serviceIP4);
    await ping(pod, s.extIP4);
    await ping(pod, s.extIP6);
    await ping(topo.node, ip.net4!);
    await ping(topo.node, ip.net6!);
    expect(await sourceSeenBy(topo.ext, s.extIP4, pod)).toBe(ip.net4);
    expect(await sourceSeenBy(topo.ext, s.extIP6, pod)).toBe(ip.net6);
    expect(await sourceSeenBy(pod2, ip.pod2v4!, pod)).toBe(ip.pod4);
    expect(await sourceSeenBy(pod2, ip.pod2v6!, pod)).toBe(ip.pod6);
  });

  it('CHECK passes', async () => {
    const r = await tool('check', 'mv-router', pod, 'net1');
    expect({ code: r.code, out: r.stdout + r.stderr }).toEqual({ code: 0, out: '' });
  });

  it('DEL: nothing of the attachment stays on the node; the pod is as the overlay left it; DEL repeats', async () => {
    expect(addResult).toBeDefined();
    const r = await tool('del', 'mv-router', pod, 'net1');
    expect({ code: r.code, out: r.stdout + r.stderr }).toEqual({ code: 0, out: '' });
    expect(diffSnapshots(nodeBefore, await snapshot(topo.node, [ip.net4!, ip.net6!]))).toEqual([]);
    expect(diffSnapshots(podBefore, await snapshot(pod))).toEqual([]);
    await ping(pod, ip.pod2v4!);
    expect((await tool('del', 'mv-router', pod, 'net1')).code).toBe(0);
  });
});
