/**
 * `veth` (dist/bin/veth) chained after Debian's macvlan + host-local, driven by cnitool inside a node
 * namespace. What the seed promises, checked with real traffic:
 *  - the pod reaches its node's IP and a Service address through veth0 (macvlan alone cannot: see
 *    e2e/reference/macvlan.test.ts), and the overlay CIDR is routed via veth0;
 *  - the pod's default route stays on the macvlan NIC (eth0), which still carries north-south traffic;
 *  - permanent neighbour entries both ways; a /32 (/128) route to the pod on the node;
 *  - CHECK verifies what ADD made; DEL leaves nothing in the node namespace; DEL is idempotent.
 */
import {
  CniDirs,
  cnitool,
  cnitoolOk,
  deleteAllNamespaces,
  diffSnapshots,
  linkCounters,
  macvlanNode,
  MacvlanNode,
  Netns,
  ping,
  routeGet,
  snapshot,
  NetSnapshot,
} from '../lib';
import { addrsOf, describeVeth, macOf, neighOn, newHostVeths, vethChain } from './helpers';

const ipOf = (cidr: string): string => cidr.split('/')[0]!;

describeVeth('veth after macvlan + host-local via cnitool (IPv4, CNI 1.0.0)', () => {
  const NET = 'mv-veth';
  let topo: MacvlanNode;
  let dirs: CniDirs;
  let p1: Netns;
  let p2: Netns;
  let before: NetSnapshot;
  let afterAdd: NetSnapshot;
  const podIP: Record<string, string> = {};
  let hostVeth1 = '';

  const tool = (cmd: Parameters<typeof cnitool>[0], pod: Netns) => cnitool(cmd, NET, pod.path, { node: topo.node, confDir: dirs.confDir });

  beforeAll(async () => {
    topo = await macvlanNode({ ipv6: false });
    dirs = new CniDirs();
    dirs.writeConflist(vethChain(topo, { name: NET, dataDir: dirs.ipamDir, logFile: `${dirs.logDir}/veth.log` }));
    p1 = await Netns.create('pod');
    p2 = await Netns.create('pod');
    before = await snapshot(topo.node);
  });

  afterAll(async () => {
    for (const p of [p1, p2]) if (p) await tool('del', p);
    await deleteAllNamespaces();
    dirs?.remove();
  });

  it('ADD returns the macvlan result plus veth0 in the pod and the host veth', async () => {
    const s = topo.segments[0]!;
    for (const pod of [p1, p2]) {
      const r = await cnitoolOk('add', NET, pod.path, { node: topo.node, confDir: dirs.confDir });
      expect(r.json.cniVersion).toBe('1.0.0');
      const ifs = r.json.interfaces as { name: string; mac?: string; sandbox?: string }[];
      expect(ifs.find((i) => i.name === 'eth0')?.sandbox).toBe(pod.path);
      expect(ifs.find((i) => i.name === 'veth0')?.sandbox).toBe(pod.path);
      const ips = r.json.ips as { address: string; interface?: number }[];
      expect(ips).toHaveLength(1);
      expect(ifs[ips[0]!.interface!]?.name).toBe('eth0'); // the macvlan address stays the pod's address
      podIP[pod.name] = ipOf(ips[0]!.address);
      expect(podIP[pod.name]).toMatch(new RegExp(`^${s.subnet4.replace(/\.0\/24$/, '').replace(/\./g, '\\.')}\\.1\\d\\d$`));
    }
    afterAdd = await snapshot(topo.node, Object.values(podIP));
    const veths = newHostVeths(before, afterAdd);
    expect(veths).toHaveLength(2);
  });

  it('in the pod: default route on eth0 (macvlan); node IP, Service and overlay CIDRs via veth0', async () => {
    const s = topo.segments[0]!;
    const defaults = await p1.ipJson<{ dev: string; gateway?: string }>('route', 'show', 'default');
    expect(defaults).toEqual([expect.objectContaining({ dev: 'eth0', gateway: s.extIP4 })]);
    expect(await routeGet(p1, s.nodeIP4)).toMatchObject({ dev: 'veth0' });
    expect(await routeGet(p1, topo.serviceIP4)).toMatchObject({ dev: 'veth0' });
    expect(await routeGet(p1, '10.244.3.7')).toMatchObject({ dev: 'veth0' }); // overlay_hijack_subnet
    expect(await routeGet(p1, '192.168.200.1')).toMatchObject({ dev: 'eth0' }); // anything else: default route
    expect(await addrsOf(p1, 'eth0')).toEqual([podIP[p1.name]]);
  });

  it('permanent neighbours both ways and a host route to the pod on the node', async () => {
    const s = topo.segments[0]!;
    const [hostRoute] = await topo.node.ipJson<{ dev: string }>('route', 'get', podIP[p1.name]!);
    const hostVeth = hostRoute!.dev;
    expect(hostVeth).toMatch(/^veth/);
    const podVethMac = await macOf(p1, 'veth0');
    const hostVethMac = await macOf(topo.node, hostVeth);
    expect(await neighOn(topo.node, hostVeth)).toContainEqual(
      expect.objectContaining({ dst: podIP[p1.name], lladdr: podVethMac, state: expect.arrayContaining(['PERMANENT']) }),
    );
    expect(await neighOn(p1, 'veth0')).toContainEqual(
      expect.objectContaining({ dst: s.nodeIP4, lladdr: hostVethMac, state: expect.arrayContaining(['PERMANENT']) }),
    );
    hostVeth1 = hostVeth;
  });

  it('real traffic: node IP and Service over veth0; external host and other pod over eth0; node -> pod', async () => {
    const s = topo.segments[0]!;
    const v0 = await linkCounters(p1, 'veth0');
    await ping(p1, s.nodeIP4);
    await ping(p1, topo.serviceIP4);
    const v1 = await linkCounters(p1, 'veth0');
    expect(v1.txPackets - v0.txPackets).toBeGreaterThanOrEqual(2);
    expect(v1.rxPackets - v0.rxPackets).toBeGreaterThanOrEqual(2);

    const e0 = await linkCounters(p1, 'eth0');
    await ping(p1, s.extIP4);
    await ping(p1, podIP[p2.name]!);
    expect((await linkCounters(p1, 'eth0')).txPackets - e0.txPackets).toBeGreaterThanOrEqual(2);

    await ping(topo.node, podIP[p1.name]!); // the node reaches the pod through the host veth
    await ping(topo.ext, podIP[p2.name]!);
  });

  it('CHECK passes; CHECK fails once something ADD made is gone', async () => {
    expect((await tool('check', p1)).code).toBe(0);
    expect((await tool('check', p2)).code).toBe(0);
    await p2.ip('route', 'del', topo.serviceCidr4, 'dev', 'veth0');
    const r = await tool('check', p2);
    expect(r.code).not.toBe(0);
    expect(r.stdout + r.stderr).toMatch(new RegExp(topo.serviceCidr4.replace(/\./g, '\\.').replace('/', '\\/')));
  });

  it('DEL leaves the node exactly as before ADD; leases are released; DEL again succeeds', async () => {
    for (const pod of [p1, p2]) {
      const r = await tool('del', pod);
      expect(r.stdout + r.stderr).toBe('');
      expect(r.code).toBe(0);
    }
    expect(diffSnapshots(before, await snapshot(topo.node, Object.values(podIP)))).toEqual([]);
    expect(await topo.node.ipJson('link', 'show', 'dev', hostVeth1).catch(() => [])).toEqual([]);
    expect(dirs.leases(NET)).toEqual([]);
    for (const pod of [p1, p2]) expect((await tool('del', pod)).code).toBe(0);
  });

  // libcni runs a chain's DEL in reverse and stops at the first error: a veth DEL that failed on the field its
  // ADD rejected would keep macvlan and host-local from freeing the pod's NIC and lease (kubelet retries
  // forever, the pod stays Terminating).
  it('a config ADD rejects: ADD fails naming the field, the chain DEL then succeeds and frees the lease', async () => {
    const BAD = 'mv-veth-bad';
    const extra = { service_hijack_subnet: ['10.96.0.1/12'] };
    dirs.writeConflist(vethChain(topo, { name: BAD, dataDir: dirs.ipamDir, logFile: `${dirs.logDir}/veth-bad.log`, extra }));
    const p4 = await Netns.create('pod');
    const base = await snapshot(topo.node);
    const add = await cnitool('add', BAD, p4.path, { node: topo.node, confDir: dirs.confDir });
    expect(add.code).not.toBe(0);
    expect(add.stdout + add.stderr).toMatch(/service_hijack_subnet/); // cnitool prints the plugin's error text
    expect(dirs.leases(BAD)).toHaveLength(1); // host-local's ADD ran; the runtime's DEL must free it
    const del = await cnitool('del', BAD, p4.path, { node: topo.node, confDir: dirs.confDir });
    expect(del.stdout + del.stderr).toBe('');
    expect(del.code).toBe(0);
    expect(dirs.leases(BAD)).toEqual([]);
    expect((await p4.ipJson<{ ifname: string }>('link', 'show')).map((l) => l.ifname)).toEqual(['lo']);
    expect(diffSnapshots(base, await snapshot(topo.node))).toEqual([]);
  });

  it('DEL after the pod namespace is gone succeeds and cleans the node', async () => {
    const p3 = await Netns.create('pod');
    const base = await snapshot(topo.node);
    await cnitoolOk('add', NET, p3.path, { node: topo.node, confDir: dirs.confDir });
    const path = p3.path;
    await p3.delete();
    const r = await cnitool('del', NET, path, { node: topo.node, confDir: dirs.confDir });
    expect(r.code).toBe(0);
    expect(diffSnapshots(base, await snapshot(topo.node))).toEqual([]);
    expect(dirs.leases(NET)).toEqual([]);
  });
});

describeVeth('veth after macvlan + host-local via cnitool (dual-stack)', () => {
  const NET = 'mv-veth-ds';
  let topo: MacvlanNode;
  let dirs: CniDirs;
  let pod: Netns;

  beforeAll(async () => {
    topo = await macvlanNode({ ipv6: true });
    dirs = new CniDirs();
    dirs.writeConflist(vethChain(topo, { name: NET, dataDir: dirs.ipamDir, ipv6: true, logFile: `${dirs.logDir}/veth.log` }));
    pod = await Netns.create('pod');
  });

  afterAll(async () => {
    if (pod) await cnitool('del', NET, pod.path, { node: topo.node, confDir: dirs.confDir });
    await deleteAllNamespaces();
    dirs?.remove();
  });

  it('IPv4 and IPv6: node IPs and Service IPs via veth0, external host via eth0, clean DEL', async () => {
    const s = topo.segments[0]!;
    const before = await snapshot(topo.node);
    const r = await cnitoolOk('add', NET, pod.path, { node: topo.node, confDir: dirs.confDir });
    const ips = (r.json.ips as { address: string }[]).map((i) => ipOf(i.address));
    expect(ips.filter((i) => i.includes(':'))).toHaveLength(1);
    expect(ips.filter((i) => !i.includes(':'))).toHaveLength(1);

    for (const dst of [s.nodeIP4, s.nodeIP6, topo.serviceIP4, topo.serviceIP6])
      expect(await routeGet(pod, dst)).toMatchObject({ dev: 'veth0' });
    for (const dst of ['192.168.200.1', 'fd00:99::1']) expect(await routeGet(pod, dst)).toMatchObject({ dev: 'eth0' });

    const v0 = await linkCounters(pod, 'veth0');
    for (const dst of [s.nodeIP4, s.nodeIP6, topo.serviceIP4, topo.serviceIP6]) await ping(pod, dst);
    expect((await linkCounters(pod, 'veth0')).txPackets - v0.txPackets).toBeGreaterThanOrEqual(4);
    await ping(pod, s.extIP4);
    await ping(pod, s.extIP6);
    for (const ip of ips) await ping(topo.node, ip);

    await cnitoolOk('check', NET, pod.path, { node: topo.node, confDir: dirs.confDir });
    await cnitoolOk('del', NET, pod.path, { node: topo.node, confDir: dirs.confDir });
    expect(diffSnapshots(before, await snapshot(topo.node, ips))).toEqual([]);
    expect(dirs.leases(NET)).toEqual([]);
  });
});

describeVeth('veth result versions and skip_call via cnitool', () => {
  let topo: MacvlanNode;
  let dirs: CniDirs;

  beforeAll(async () => {
    topo = await macvlanNode({ ipv6: false });
    dirs = new CniDirs();
  });

  afterAll(async () => {
    await deleteAllNamespaces();
    dirs?.remove();
  });

  it.each(['0.3.1', '0.4.0', '1.0.0'])('[%s] ADD answers in the config version; CHECK (>= 0.4.0); DEL leaves nothing', async (version) => {
    const net = `mv-veth-${version.replace(/\./g, '')}`;
    dirs.writeConflist(vethChain(topo, { name: net, cniVersion: version, dataDir: dirs.ipamDir, logFile: `${dirs.logDir}/veth.log` }));
    const pod = await Netns.create('pod');
    const before = await snapshot(topo.node);
    const r = await cnitoolOk('add', net, pod.path, { node: topo.node, confDir: dirs.confDir });
    expect(r.json.cniVersion).toBe(version);
    const ip = r.json.ips[0];
    if (version.startsWith('0.')) expect(ip.version).toBe('4');
    else expect(ip.version).toBeUndefined();
    expect((r.json.interfaces as { name: string }[]).map((i) => i.name)).toEqual(expect.arrayContaining(['eth0', 'veth0']));
    await ping(pod, topo.segments[0]!.nodeIP4);
    if (version !== '0.3.1') await cnitoolOk('check', net, pod.path, { node: topo.node, confDir: dirs.confDir });
    await cnitoolOk('del', net, pod.path, { node: topo.node, confDir: dirs.confDir });
    expect(diffSnapshots(before, await snapshot(topo.node, [ipOf(ip.address)]))).toEqual([]);
    await pod.delete();
  });

  it("skip_call: the result is macvlan's, nothing is added to the pod or the node", async () => {
    const net = 'mv-veth-skip';
    const extra = { skip_call: true };
    dirs.writeConflist(vethChain(topo, { name: net, dataDir: dirs.ipamDir, logFile: `${dirs.logDir}/veth.log`, extra }));
    const pod = await Netns.create('pod');
    const before = await snapshot(topo.node);
    const r = await cnitoolOk('add', net, pod.path, { node: topo.node, confDir: dirs.confDir });
    expect((r.json.interfaces as { name: string }[]).map((i) => i.name)).toEqual(['eth0']);
    expect(await pod.ipJson('link', 'show', 'dev', 'veth0').catch(() => [])).toEqual([]);
    expect(diffSnapshots(before, await snapshot(topo.node))).toEqual([]);
    await cnitoolOk('del', net, pod.path, { node: topo.node, confDir: dirs.confDir });
    await pod.delete();
  });
});
