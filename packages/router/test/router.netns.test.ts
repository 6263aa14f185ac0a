/**
 * router ADD/CHECK/DEL in real network namespaces, every CNI version, with
 * real traffic: the pod reaches another overlay pod and Services through
 * eth0, the host through eth0, an external host through net1 with net1's
 * address, and the host reaches net1's address through the overlay peer.
 */
import {
  call,
  changesSince,
  diff,
  json,
  makeTopo,
  pings,
  prevResult,
  routerConf,
  sh,
  snapshot,
  VERSIONS,
  type IpNeigh,
  type IpRoute,
  type IpRule,
  type Topo,
} from './helpers';

jest.setTimeout(60_000);

const cidrOf = (r: IpRule): string => `${r.dst}${r.dstlen !== undefined ? `/${r.dstlen}` : ''}`;
const at = (v: string): number => VERSIONS.indexOf(v as (typeof VERSIONS)[number]);

let t: Topo;
afterEach(() => {
  t?.cleanup();
});

describe.each(VERSIONS)('router [%s]', (version) => {
  beforeEach(() => {
    t = makeTopo();
  });

  it('ADD routes east-west through eth0 and north-south through net1; CHECK passes; DEL restores everything', async () => {
    // Without router: the macvlan NIC cannot reach its own host, and the host cannot reach it.
    expect(pings(t.pod, '10.6.0.1', '10.6.1.5')).toBe(false);
    const hostBefore = snapshot(t.host);
    const podBefore = snapshot(t.pod);

    const prev = prevResult(version, t);
    const add = await call(t, { command: 'ADD', conf: routerConf(version, prev) });
    expect(add.raw).not.toContain('"code"');
    expect(add.code).toBe(0);
    expect(add.out?.['cniVersion']).toBe(version);
    expect(add.out?.['interfaces']).toEqual(prev['interfaces']);
    if (at(version) < at('1.0.0')) expect((add.out?.['ips'] as { version: string }[])[0]?.version).toBe('4');

    // Host: 10.6.1.5 is inside br0's subnet: route in table 500, looked up by the pref-1000 rule.
    const hr = json<IpRoute[]>(t.host, 'ip -j route show table 500');
    expect(hr).toEqual([expect.objectContaining({ dst: '10.6.1.5', dev: 'caliP', protocol: '158', scope: 'link' })]);
    const hrules = json<IpRule[]>(t.host, 'ip -j rule show');
    expect(hrules.filter((r) => r.priority === 1000)).toEqual([expect.objectContaining({ table: '500' })]);
    const podMac = sh(t.pod, 'cat /sys/class/net/eth0/address').trim();
    const caliMac = sh(t.host, 'cat /sys/class/net/caliP/address').trim();
    expect(json<IpNeigh[]>(t.host, 'ip -j neigh show 10.6.1.5 dev caliP')[0]).toMatchObject({ lladdr: podMac, state: ['PERMANENT'] });

    // Pod: eth0's routes left main for table 99; net1 owns main with the default from prevResult.
    const main = json<IpRoute[]>(t.pod, 'ip -j route show');
    expect(main.find((r) => r.dst === 'default')).toMatchObject({ dev: 'net1', gateway: '10.6.0.254' });
    expect(main.some((r) => r.dev === 'eth0')).toBe(false);
    const t99 = json<IpRoute[]>(t.pod, 'ip -j route show table 99');
    expect(t99.find((r) => r.dst === 'default')).toMatchObject({ dev: 'eth0', gateway: '169.254.1.1' });
    expect(t99.find((r) => r.dst === '10.6.0.1')).toMatchObject({ dev: 'eth0', prefsrc: '10.244.0.5', protocol: '158' });
    expect(t99.find((r) => r.dst === '10.96.0.0/12')).toMatchObject({ dev: 'eth0', gateway: '10.6.0.1', prefsrc: '10.244.0.5' });
    const rules = json<IpRule[]>(t.pod, 'ip -j rule show');
    expect(
      rules
        .filter((r) => r.priority === 90)
        .map(cidrOf)
        .sort(),
    ).toEqual(['10.244.0.0/16', '10.6.0.1', '10.96.0.0/12']);
    expect(rules.find((r) => r.priority === 99)).toMatchObject({ src: '10.244.0.5', table: '99' });
    expect(json<IpNeigh[]>(t.pod, 'ip -j neigh show 10.6.0.1 dev eth0')[0]).toMatchObject({ lladdr: caliMac, state: ['PERMANENT'] });
    expect(sh(t.pod, 'cat /proc/sys/net/ipv4/conf/net1/rp_filter').trim()).toBe('2');

    // Real traffic.
    expect(pings(t.pod, '10.244.0.6')).toBe(true); // another overlay pod, via eth0
    expect(pings(t.pod, '10.96.0.10')).toBe(true); // a Service address on the host, via eth0
    expect(pings(t.pod, '10.6.0.1')).toBe(true); // the host, via eth0
    expect(pings(t.pod, '10.6.0.1', '10.6.1.5')).toBe(true); // the host, from net1's address
    expect(pings(t.host, '10.6.1.5')).toBe(true); // the host reaches net1's address through caliP
    expect(pings(t.pod, '10.6.0.9')).toBe(true); // an external host on net1's segment
    expect(pings(t.pod, '192.168.100.1')).toBe(true); // beyond net1's gateway: ext routes back only to 10.6/16
    expect(pings(t.peer, '10.244.0.5')).toBe(true); // the overlay still reaches the pod's eth0

    if (at(version) >= at('0.4.0')) {
      const chk = await call(t, { command: 'CHECK', conf: routerConf(version, add.out) });
      expect(chk.raw).toBe('');
      expect(chk.code).toBe(0);
    } else {
      expect((await call(t, { command: 'CHECK', conf: routerConf(version, add.out) })).out?.['code']).toBe(1);
    }

    const del = await call(t, { command: 'DEL', conf: routerConf(version, add.out) });
    expect(del.raw).toBe('');
    expect(del.code).toBe(0);
    expect(diff(hostBefore, snapshot(t.host))).toEqual([]);
    expect(diff(podBefore, snapshot(t.pod))).toEqual([]);
    expect(pings(t.pod, '10.244.0.6')).toBe(true); // eth0 owns main again
    expect((await call(t, { command: 'DEL', conf: routerConf(version, add.out) })).code).toBe(0);
    expect(diff(hostBefore, snapshot(t.host))).toEqual([]);
  });
});

describe.each([
  ['v6', 'calico', '1.1.0'],
  ['dual', 'calico', '1.0.0'],
  ['v4', 'bridge', '0.4.0'],
  ['dual', 'bridge', '1.1.0'],
] as const)('router %s with a %s overlay [%s]', (stack, overlay, version) => {
  beforeEach(() => {
    t = makeTopo({ stack, overlay });
  });

  it('wires every family, passes CHECK, and DEL leaves host and pod as they were', async () => {
    const changes = changesSince(t);
    const add = await call(t, { command: 'ADD', conf: routerConf(version, prevResult(version, t)) });
    expect(add.raw).not.toContain('"code"');
    const peerDev = overlay === 'bridge' ? 'cni0' : 'caliP';
    const fams = stack === 'dual' ? ['4', '6'] : stack === 'v6' ? ['6'] : ['4'];
    for (const f of fams) {
      const v6 = f === '6';
      const net1 = v6 ? 'fd00:6::15' : '10.6.1.5';
      const hostRoutes = json<IpRoute[]>(t.host, `ip -${f} -j route show table 500`);
      expect(hostRoutes).toEqual([expect.objectContaining({ dst: net1, dev: peerDev, protocol: '158' })]);
      expect(json<IpRule[]>(t.host, `ip -${f} -j rule show`).filter((r) => r.priority === 1000)).toHaveLength(1);
      expect(json<IpNeigh[]>(t.host, `ip -${f} -j neigh show ${net1} dev ${peerDev}`)[0]?.state).toEqual(['PERMANENT']);
      expect(json<IpRoute[]>(t.pod, `ip -${f} -j route show`).find((r) => r.dst === 'default')).toMatchObject({ dev: 'net1' });

      expect(pings(t.pod, v6 ? 'fd00:244::6' : '10.244.0.6')).toBe(true);
      expect(pings(t.pod, v6 ? 'fd00:6::1' : '10.6.0.1')).toBe(true);
      expect(pings(t.pod, v6 ? 'fd00:6::1' : '10.6.0.1', net1)).toBe(true);
      expect(pings(t.pod, v6 ? 'fd00:96::10' : '10.96.0.10')).toBe(true);
      expect(pings(t.pod, v6 ? 'fd00:100::1' : '192.168.100.1')).toBe(true);
      expect(pings(t.host, net1)).toBe(true);
      expect(pings(t.peer, v6 ? 'fd00:244::5' : '10.244.0.5')).toBe(true);
    }
    const chk = await call(t, { command: 'CHECK', conf: routerConf(version, add.out) });
    expect(chk.raw).toBe('');
    expect((await call(t, { command: 'DEL', conf: routerConf(version, add.out) })).code).toBe(0);
    expect(changes()).toEqual({ host: [], pod: [] });
  });
});

describe.each(VERSIONS)('router DEL without help [%s]', (version) => {
  beforeEach(() => {
    t = makeTopo({ stack: 'dual' });
  });

  it('without prevResult: reads the addresses from the pod and removes everything', async () => {
    const changes = changesSince(t);
    expect((await call(t, { command: 'ADD', conf: routerConf(version, prevResult(version, t)) })).code).toBe(0);
    const del = await call(t, { command: 'DEL', conf: routerConf(version, undefined) });
    expect(del.raw).toBe('');
    expect(changes()).toEqual({ host: [], pod: [] });
  });

  it('with the netns gone and without prevResult: the host objects go by their attachment key', async () => {
    // A bridge overlay: the host objects hang off cni0, which outlives the pod (a calico veth would die with the
    // netns and take router's routes with it, leaving DEL nothing to prove).
    t.cleanup();
    t = makeTopo({ stack: 'dual', overlay: 'bridge' });
    const hostBefore = snapshot(t.host);
    const add = await call(t, { command: 'ADD', conf: routerConf(version, prevResult(version, t)) });
    expect(add.code).toBe(0);
    expect(diff(hostBefore, snapshot(t.host)).length).toBeGreaterThan(0);
    const podPath = t.pod.ns.path;
    t.pod.cleanup();
    expect((await call(t, { command: 'DEL', conf: routerConf(version, undefined), netns: podPath })).code).toBe(0);
    expect(diff(hostBefore, snapshot(t.host))).toEqual([]);
    expect((await call(t, { command: 'DEL', conf: routerConf(version, undefined), netns: '' })).code).toBe(0);
    expect((await call(t, { command: 'DEL', conf: routerConf(version, add.out), netns: podPath })).code).toBe(0);
  });
});

describe("router with a hijacked subnet equal to eth0's own subnet", () => {
  beforeEach(() => {
    t = makeTopo({ stack: 'dual', overlay: 'bridge' });
  });

  it("keeps eth0's connected route (moved to table 99) instead of replacing it, and restores it", async () => {
    const v = '1.1.0';
    const podBefore = snapshot(t.pod);
    const conf = (p: Record<string, unknown> | undefined): Record<string, unknown> =>
      routerConf(v, p, { overlay_hijack_subnet: ['10.244.0.0/24', 'fd00:244::/64'] });
    const add = await call(t, { command: 'ADD', conf: conf(prevResult(v, t)) });
    expect(add.raw).not.toContain('"code"');
    const t99 = json<IpRoute[]>(t.pod, 'ip -j route show table 99');
    expect(t99.filter((r) => r.dst === '10.244.0.0/24')).toEqual([expect.objectContaining({ dev: 'eth0', protocol: 'kernel' })]);
    expect(pings(t.pod, '10.244.0.6')).toBe(true);
    expect(pings(t.pod, 'fd00:244::6')).toBe(true);
    expect((await call(t, { command: 'CHECK', conf: conf(add.out) })).raw).toBe('');
    expect((await call(t, { command: 'DEL', conf: conf(add.out) })).code).toBe(0);
    expect(diff(podBefore, snapshot(t.pod))).toEqual([]);
  });
});

describe("router when net1's default joined eth0's in one multipath route", () => {
  beforeEach(() => {
    t = makeTopo({ stack: 'dual', overlay: 'bridge' });
    // What the reference plugins' ConfigureIface leaves (Go's RouteAddEcmp: NLM_F_CREATE without EXCL): IPv6 makes
    // the second default a sibling of eth0's, one ECMP route. IPv4 gets the same shape with explicit next hops.
    sh(t.pod, 'ip -6 route prepend default via fd00:6::fe dev net1');
    sh(t.pod, 'ip route replace default nexthop via 10.244.0.1 dev eth0 nexthop via 10.6.0.254 dev net1');
  });

  const defaults = (f: 4 | 6, table: number | 'main'): { gateway?: string; dev?: string; nexthops?: unknown[] }[] =>
    json<{ dst: string; table?: string; gateway?: string; dev?: string; nexthops?: unknown[] }[]>(t.pod, `ip -${f} -j route show table all`)
      .filter((r) => r.dst === 'default' && (r.table ?? 'main') === String(table))
      .map(({ gateway, dev, nexthops }) => ({ gateway, dev, nexthops }));

  it("splits it: main keeps only net1's next hop, table 99 gets eth0's; every destination takes one path; DEL gives main back to eth0", async () => {
    const v = '1.0.0';
    const add = await call(t, { command: 'ADD', conf: routerConf(v, prevResult(v, t)) });
    expect(add.raw).not.toContain('"code"');
    expect(defaults(6, 'main')).toEqual([{ gateway: 'fd00:6::fe', dev: 'net1', nexthops: undefined }]);
    expect(defaults(4, 'main')).toEqual([{ gateway: '10.6.0.254', dev: 'net1', nexthops: undefined }]);
    expect(defaults(6, 99)).toEqual([{ gateway: 'fd00:244::1', dev: 'eth0', nexthops: undefined }]);
    expect(defaults(4, 99)).toEqual([{ gateway: '10.244.0.1', dev: 'eth0', nexthops: undefined }]);
    // Many destinations: a multipath default left in main would send some of them (by flow hash) through eth0.
    for (let i = 1; i <= 16; i++) {
      expect(json<{ dev: string }[]>(t.pod, `ip -6 -j route get fd00:100::${i.toString(16)}`)[0]).toMatchObject({ dev: 'net1' });
      expect(json<{ dev: string }[]>(t.pod, `ip -4 -j route get 192.168.100.${i}`)[0]).toMatchObject({ dev: 'net1' });
    }
    expect(pings(t.pod, 'fd00:100::1')).toBe(true);
    expect(pings(t.pod, '192.168.100.1')).toBe(true);
    expect((await call(t, { command: 'CHECK', conf: routerConf(v, add.out) })).raw).toBe('');
    expect((await call(t, { command: 'DEL', conf: routerConf(v, add.out) })).code).toBe(0);
    expect(defaults(6, 'main')).toEqual([{ gateway: 'fd00:244::1', dev: 'eth0', nexthops: undefined }]);
    expect(defaults(4, 'main')).toEqual([{ gateway: '10.244.0.1', dev: 'eth0', nexthops: undefined }]);
    expect(defaults(6, 99)).toEqual([]);
  });

  it("CHECK fails while eth0 is still one of main's next hops", async () => {
    const v = '1.0.0';
    const add = await call(t, { command: 'ADD', conf: routerConf(v, prevResult(v, t)) });
    expect(add.code).toBe(0);
    sh(t.pod, 'ip -6 route prepend default via fd00:244::1 dev eth0 onlink');
    const chk = await call(t, { command: 'CHECK', conf: routerConf(v, add.out) });
    expect(chk.out).toMatchObject({ code: 102, details: expect.stringContaining("eth0's IPv6 default route is still in main") });
  });
});
