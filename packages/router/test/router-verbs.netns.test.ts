/**
 * CHECK finds each missing object; GC removes host objects of attachments
 * not listed (and only of its own network); STATUS; the options sriov,
 * skip_call and migrate_route; bad input gives the right code and changes
 * nothing; a failure half-way unwinds every step.
 */
import * as path from 'node:path';
import * as os from 'node:os';
import { readFileSync, rmSync } from 'node:fs';
import { newNs } from '@cnikit/netlib-testing';
import {
  bridgePod,
  call,
  changesSince,
  diff,
  json,
  macvlanNic,
  makeTopo,
  pings,
  prevResult,
  routerConf,
  sh,
  snapshot,
  tableRoutes,
  type IpNeigh,
  type IpRule,
  type Topo,
} from './helpers';

jest.setTimeout(60_000);

let t: Topo;
afterEach(() => {
  t?.cleanup();
});

describe('router CHECK finds each missing object', () => {
  const v = '1.1.0';
  it.each([
    ['host route', 'host', 'ip route del 10.6.1.5/32 table 500', 'host route 10.6.1.5/32 dev caliP table 500'],
    ['host rule', 'host', 'ip rule del pref 1000', 'host rule ipv4 pref 1000 lookup 500'],
    ['host neighbour', 'host', 'ip neigh del 10.6.1.5 dev caliP', 'host neighbour 10.6.1.5'],
    ['pod route to the host', 'pod', 'ip route del 10.6.0.1 table 99', 'pod route 10.6.0.1/32'],
    ['pod route to a hijacked subnet', 'pod', 'ip route del 10.96.0.0/12 table 99', 'pod route 10.96.0.0/12 via 10.6.0.1'],
    ['pod rule to a hijacked subnet', 'pod', 'ip rule del to 10.244.0.0/16 pref 90', 'pod rule to 10.244.0.0/16 lookup 99'],
    ['pod rule to the host', 'pod', 'ip rule del to 10.6.0.1 pref 90', 'pod rule to 10.6.0.1/32 lookup 99'],
    ['pod rule from the overlay address', 'pod', 'ip rule del from 10.244.0.5 pref 99', 'pod rule from 10.244.0.5 lookup 99'],
    ['pod neighbour', 'pod', 'ip neigh del 10.6.0.1 dev eth0', 'pod neighbour 10.6.0.1'],
    [
      "eth0's default back in main",
      'pod',
      'ip route add default via 169.254.1.1 dev eth0 onlink metric 7',
      "eth0's IPv4 default route is still in main",
    ],
    ["net1's default route", 'pod', 'ip route del default dev net1', 'pod route default via 10.6.0.254 dev net1 table 254'],
  ] as const)('%s', async (_name, where, breakIt, message) => {
    t = makeTopo();
    const add = await call(t, { command: 'ADD', conf: routerConf(v, prevResult(v, t)) });
    expect(add.code).toBe(0);
    expect((await call(t, { command: 'CHECK', conf: routerConf(v, add.out) })).raw).toBe('');
    sh(where === 'host' ? t.host : t.pod, breakIt);
    const bad = await call(t, { command: 'CHECK', conf: routerConf(v, add.out) });
    expect(bad.code).toBe(1);
    expect(bad.out?.['code']).toBe(102);
    expect(bad.out?.['msg']).toBe('router check failed');
    expect(String(bad.out?.['details'])).toContain(message);
  });

  it("IPv6: the pod neighbour is the host peer's link-local address", async () => {
    t = makeTopo({ stack: 'v6' });
    const add = await call(t, { command: 'ADD', conf: routerConf(v, prevResult(v, t)) });
    expect(add.code).toBe(0);
    const ll = json<{ addr_info: { local: string; scope: string }[] }[]>(t.host, 'ip -6 -j addr show dev caliP')[0]!.addr_info.find(
      (a) => a.scope === 'link',
    )!.local;
    expect(tableRoutes(t.pod, 99, 6).find((r) => r.dst === 'fd00:96::/112')?.gateway).toBe(ll);
    sh(t.pod, `ip -6 neigh del ${ll} dev eth0`);
    const bad = await call(t, { command: 'CHECK', conf: routerConf(v, add.out) });
    expect(String(bad.out?.['details'])).toContain(`pod neighbour ${ll}`);
  });

  it('a missing overlay interface or chained interface is reported, not crashed on', async () => {
    t = makeTopo();
    const add = await call(t, { command: 'ADD', conf: routerConf(v, prevResult(v, t)) });
    sh(t.pod, 'ip link del net1');
    const bad = await call(t, { command: 'CHECK', conf: routerConf(v, add.out) });
    expect(bad.out?.['code']).toBe(7);
    expect(String(bad.out?.['msg'])).toContain('net1');
  });
});

describe('router GC', () => {
  const v = '1.1.0';
  beforeEach(() => {
    t = makeTopo({ peerNet1: true });
  });
  const peer = { containerId: 'peer0123456789', ifName: 'net1' };
  const gcConf = (valid: unknown, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
    ...routerConf(v, undefined),
    'cni.dev/valid-attachments': valid,
    ...extra,
  });

  it('removes host routes, neighbours and the rule of attachments not listed, of its own network only', async () => {
    const hostBefore = snapshot(t.host);
    expect((await call(t, { command: 'ADD', conf: routerConf(v, prevResult(v, t)) })).code).toBe(0);
    expect(
      (
        await call(t, {
          command: 'ADD',
          conf: routerConf(v, prevResult(v, t, 'net1', 6, 6, t.peer.ns.path)),
          netns: t.peer.ns.path,
          ...peer,
        })
      ).code,
    ).toBe(0);
    const both = snapshot(t.host);

    // Every attachment listed: nothing changes. Another network's GC never touches ours.
    expect(
      (
        await call(t, {
          command: 'GC',
          conf: gcConf([
            { containerID: t.containerId, ifname: 'net1' },
            { containerID: peer.containerId, ifname: 'net1' },
          ]),
        })
      ).raw,
    ).toBe('');
    expect((await call(t, { command: 'GC', conf: gcConf([], { name: 'other-net' }) })).code).toBe(0);
    expect(diff(both, snapshot(t.host))).toEqual([]);

    // The peer pod is gone for the runtime: its route and neighbour go, ours and the rule stay.
    expect((await call(t, { command: 'GC', conf: gcConf([{ containerID: t.containerId, ifname: 'net1' }]) })).code).toBe(0);
    expect(tableRoutes(t.host, 500).map((r) => r.dst)).toEqual(['10.6.1.5']);
    expect(json<IpNeigh[]>(t.host, 'ip -j neigh show nud permanent').map((n) => n.dst)).toEqual(['10.6.1.5']);
    expect(pings(t.host, '10.6.1.5')).toBe(true);

    // Legacy key, empty list: everything of the network goes, the rule with it.
    const { ['cni.dev/valid-attachments']: _drop, ...base } = gcConf([]);
    expect((await call(t, { command: 'GC', conf: { ...base, 'cni.dev/attachments': [] } })).code).toBe(0);
    expect(diff(hostBefore, snapshot(t.host))).toEqual([]);
  });

  it('removes a host rule nothing needs any more', async () => {
    const hostBefore = snapshot(t.host);
    sh(t.host, 'ip rule add pref 1000 lookup 500');
    expect((await call(t, { command: 'GC', conf: gcConf([]) })).code).toBe(0);
    expect(diff(hostBefore, snapshot(t.host))).toEqual([]);
  });

  it('needs the attachment list', async () => {
    const res = await call(t, { command: 'GC', conf: routerConf(v, undefined) });
    expect(res.out?.['code']).toBe(7);
  });
});

describe('router STATUS and VERSION', () => {
  beforeEach(() => {
    t = makeTopo();
  });
  it('STATUS succeeds on 1.1.0, is refused below, and reports a bad config', async () => {
    expect(
      (
        await call(t, {
          command: 'STATUS',
          conf: routerConf('1.1.0', undefined),
          env: { CNI_CONTAINERID: undefined, CNI_NETNS: undefined, CNI_IFNAME: undefined },
        })
      ).code,
    ).toBe(0);
    expect((await call(t, { command: 'STATUS', conf: routerConf('1.0.0', undefined) })).out?.['code']).toBe(1);
    expect((await call(t, { command: 'STATUS', conf: routerConf('1.1.0', undefined, { host_rule_table: 254 }) })).out?.['code']).toBe(7);
  });
  it('VERSION lists every version', async () => {
    const res = await call(t, { command: 'VERSION', conf: { cniVersion: '1.0.0' } });
    expect(res.out?.['cniVersion']).toBe('1.0.0');
    expect(res.out?.['supportedVersions']).toEqual(expect.arrayContaining(['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0']));
  });
});

describe('router options', () => {
  const v = '1.0.0';

  it('sriov: no neighbour entries anywhere, traffic still flows (ARP through proxy_arp)', async () => {
    t = makeTopo();
    const changes = changesSince(t);
    const add = await call(t, { command: 'ADD', conf: routerConf(v, prevResult(v, t), { sriov: true }) });
    expect(add.code).toBe(0);
    expect(json<IpNeigh[]>(t.host, 'ip -j neigh show nud permanent')).toEqual([]);
    expect(json<IpNeigh[]>(t.pod, 'ip -j neigh show nud permanent').map((n) => n.dst)).toEqual(['169.254.1.1']);
    expect(pings(t.pod, '10.6.0.1')).toBe(true);
    expect(pings(t.host, '10.6.1.5')).toBe(true);
    expect((await call(t, { command: 'CHECK', conf: routerConf(v, add.out, { sriov: true }) })).raw).toBe('');
    expect((await call(t, { command: 'DEL', conf: routerConf(v, add.out, { sriov: true }) })).code).toBe(0);
    expect(changes()).toEqual({ host: [], pod: [] });
  });

  it('skip_call: prevResult passes through, nothing changes', async () => {
    t = makeTopo();
    const changes = changesSince(t);
    const prev = prevResult(v, t);
    const add = await call(t, { command: 'ADD', conf: routerConf(v, prev, { skip_call: true }) });
    expect(add.out).toEqual(prev);
    expect((await call(t, { command: 'CHECK', conf: routerConf(v, add.out, { skip_call: true }) })).raw).toBe('');
    expect((await call(t, { command: 'DEL', conf: routerConf(v, add.out, { skip_call: true }) })).raw).toBe('');
    expect(changes()).toEqual({ host: [], pod: [] });
  });

  it('migrate_route 1: net1 keeps table 100, eth0 keeps main', async () => {
    t = makeTopo();
    const changes = changesSince(t);
    const conf = (p: Record<string, unknown> | undefined): Record<string, unknown> => routerConf(v, p, { migrate_route: 1 });
    const add = await call(t, { command: 'ADD', conf: conf(prevResult(v, t)) });
    expect(add.code).toBe(0);
    expect(tableRoutes(t.pod, 'main').find((r) => r.dst === 'default')?.dev).toBe('eth0');
    expect(tableRoutes(t.pod, 100).find((r) => r.dst === 'default')).toMatchObject({ dev: 'net1', gateway: '10.6.0.254' });
    expect(json<IpRule[]>(t.pod, 'ip -j rule show').filter((r) => r.priority === 99)).toEqual([]);
    expect(pings(t.pod, '192.168.100.1', '10.6.1.5')).toBe(true);
    expect(pings(t.pod, '192.168.100.1')).toBe(false); // unsourced north-south keeps leaving through eth0
    expect(pings(t.pod, '10.244.0.6')).toBe(true);
    expect(pings(t.host, '10.6.1.5')).toBe(true);
    expect((await call(t, { command: 'CHECK', conf: conf(add.out) })).raw).toBe('');
    expect((await call(t, { command: 'DEL', conf: conf(add.out) })).code).toBe(0);
    expect(changes()).toEqual({ host: [], pod: [] });
  });

  it('migrate_route 0 and additional_hijack_subnet', async () => {
    t = makeTopo();
    const podBefore = snapshot(t.pod);
    const conf = (p: Record<string, unknown> | undefined): Record<string, unknown> =>
      routerConf(v, p, { migrate_route: 0, additional_hijack_subnet: ['172.16.9.0/24'] });
    const add = await call(t, { command: 'ADD', conf: conf(prevResult(v, t)) });
    expect(add.code).toBe(0);
    expect(tableRoutes(t.pod, 'main').find((r) => r.dst === 'default')?.dev).toBe('net1');
    expect(json<IpRule[]>(t.pod, 'ip -j rule show').some((r) => r.priority === 90 && r.dst === '172.16.9.0')).toBe(true);
    expect(tableRoutes(t.pod, 99).find((r) => r.dst === '172.16.9.0/24')).toMatchObject({ dev: 'eth0', gateway: '10.6.0.1' });
    expect((await call(t, { command: 'CHECK', conf: conf(add.out) })).raw).toBe('');
    expect((await call(t, { command: 'DEL', conf: conf(add.out) })).code).toBe(0);
    expect(diff(podBefore, snapshot(t.pod))).toEqual([]);
  });
});

describe('router bad input changes nothing', () => {
  const v = '1.1.0';
  let changes: () => { host: string[]; pod: string[] };
  beforeEach(() => {
    t = makeTopo();
    changes = changesSince(t);
  });
  afterEach(() => {
    expect(changes()).toEqual({ host: [], pod: [] });
  });

  const prev = (): Record<string, unknown> => prevResult(v, t);
  it.each([
    ['malformed JSON', (): string => '{"cniVersion": "1.1.0", "name": ', {}, 6],
    ['unknown cniVersion', (): Record<string, unknown> => routerConf('9.9.9', prev()), {}, 1],
    ['CNI_NETNS missing', (): Record<string, unknown> => routerConf(v, prev()), { CNI_NETNS: undefined }, 4],
    ['CNI_IFNAME missing', (): Record<string, unknown> => routerConf(v, prev()), { CNI_IFNAME: undefined }, 4],
    ['CNI_CONTAINERID missing', (): Record<string, unknown> => routerConf(v, prev()), { CNI_CONTAINERID: undefined }, 4],
    ['unknown CNI_COMMAND', (): Record<string, unknown> => routerConf(v, prev()), { CNI_COMMAND: 'PATCH' }, 4],
    ['bad service CIDR', (): Record<string, unknown> => routerConf(v, prev(), { service_hijack_subnet: ['10.96.0.0/99'] }), {}, 7],
    [
      'overlay CIDR with host bits',
      (): Record<string, unknown> => routerConf(v, prev(), { overlay_hijack_subnet: ['10.244.1.1/16'] }),
      {},
      7,
    ],
    ['bad additional CIDR', (): Record<string, unknown> => routerConf(v, prev(), { additional_hijack_subnet: ['fd00::1::/64'] }), {}, 7],
    ['reserved host_rule_table', (): Record<string, unknown> => routerConf(v, prev(), { host_rule_table: 255 }), {}, 7],
    ['misspelt field', (): Record<string, unknown> => routerConf(v, prev(), { host_rule_tabel: 600 }), {}, 2],
    ['absent netns', (): Record<string, unknown> => routerConf(v, prev()), { CNI_NETNS: '/var/run/netns/cnikit-router-does-not-exist' }, 3],
    ['missing prevResult', (): Record<string, unknown> => routerConf(v, undefined), {}, 7],
    ['prevResult without IPs', (): Record<string, unknown> => routerConf(v, { cniVersion: v, interfaces: [], ips: [] }), {}, 7],
    ['overlay interface missing', (): Record<string, unknown> => routerConf(v, prev(), { overlay_interface: 'eth9' }), {}, 7],
    ['chained interface missing', (): Record<string, unknown> => routerConf(v, prevResult(v, t, 'net5')), { CNI_IFNAME: 'net5' }, 7],
    [
      'chained on the overlay NIC itself',
      (): Record<string, unknown> => routerConf(v, prevResult(v, t, 'eth0')),
      { CNI_IFNAME: 'eth0' },
      7,
    ],
  ] as const)('%s', async (_n, conf, env, code) => {
    const res = await call(t, { command: 'ADD', conf: conf(), env });
    expect(res.code).toBe(1);
    expect(res.out?.['code']).toBe(code);
    expect(typeof res.out?.['msg']).toBe('string');
    // The runtime then deletes the chain in reverse and stops at the first error: router's DEL of a config
    // it rejected must succeed, or macvlan/host-local never free the pod's NIC and lease.
    if (code === 2 || code === 7) expect(await call(t, { command: 'DEL', conf: conf(), env })).toMatchObject({ code: 0, raw: '' });
  });

  it('DEL with a config that ADD would reject still removes what an earlier ADD made', async () => {
    const add = await call(t, { command: 'ADD', conf: routerConf(v, prev()) });
    expect(add.code).toBe(0);
    const bad = {
      service_hijack_subnet: ['10.96.0.1/12'],
      host_rule_tabel: 600,
      log_options: { log_file: path.join(os.tmpdir(), `cnikit-test-router-del-${process.pid}.log`) },
    };
    expect(await call(t, { command: 'DEL', conf: routerConf(v, add.out, bad) })).toMatchObject({ code: 0, raw: '' });
    const lines = readFileSync(bad.log_options.log_file, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    rmSync(bad.log_options.log_file, { force: true });
    const warned = lines.filter((l) => l['msg'] === 'DEL: config field ignored').map((l) => String(l['warning']));
    expect(warned).toEqual([expect.stringContaining('host_rule_tabel'), expect.stringContaining('service_hijack_subnet')]);
    // afterEach: host and pod exactly as before the ADD.
  });

  it('an overlay without an address of the chained family', async () => {
    sh(t.pod, 'ip addr add fd00:6::15/64 dev net1 nodad');
    const res = await call(t, {
      command: 'ADD',
      conf: routerConf(v, {
        cniVersion: v,
        interfaces: [{ name: 'net1', sandbox: t.pod.ns.path }],
        ips: [{ address: 'fd00:6::15/64', interface: 0 }],
      }),
    });
    expect(res.out?.['code']).toBe(7);
    expect(String(res.out?.['msg'])).toContain('no address of the family');
    sh(t.pod, 'ip addr del fd00:6::15/64 dev net1');
  });

  it('a failure half-way unwinds every step, on the host and in the pod', async () => {
    // A rule in the way of the last pod step (the from-rule of eth0's migration): host routes, host
    // neighbour, host rule and the moved routes are all in place when it fails.
    sh(t.pod, 'ip rule add from 10.244.0.5 lookup 99 pref 99');
    const res = await call(t, { command: 'ADD', conf: routerConf(v, prev()) });
    expect(res.code).toBe(1);
    expect(String(res.out?.['msg'])).toContain('EEXIST');
    expect(tableRoutes(t.pod, 'main').find((r) => r.dst === 'default')?.dev).toBe('eth0');
    sh(t.pod, 'ip rule del from 10.244.0.5 lookup 99 pref 99');
    // afterEach: host and pod exactly as before the failed ADD.
  });

  it('DEL of an attachment that never was succeeds and removes nothing', async () => {
    const res = await call(t, { command: 'DEL', conf: routerConf(v, prev()) });
    expect(res.raw).toBe('');
  });
});

describe('router stale DEL (the runtime re-created the sandbox)', () => {
  const onCleanup: (() => void)[] = [];
  afterEach(() => {
    for (const f of onCleanup.splice(0)) f();
  });
  beforeEach(() => {
    t = makeTopo({ stack: 'dual', overlay: 'bridge' });
  });

  it("DEL of the old container ID, with its netns gone, leaves the new sandbox's host routes and neighbours", async () => {
    const v = '1.0.0';
    const cidA = `${t.containerId}a`;
    const cidB = `${t.containerId}b`;
    const pathA = t.pod.ns.path;
    const addA = await call(t, { command: 'ADD', conf: routerConf(v, prevResult(v, t)), containerId: cidA });
    expect(addA.code).toBe(0);
    // Sandbox A dies with its netns; sandbox B gets the same addresses on a new eth0 and net1.
    t.pod.cleanup();
    t.pod = newNs('rp');
    const podB = t.pod;
    onCleanup.push(() => podB.cleanup()); // makeTopo's cleanup knows only the first pod
    bridgePod(t.host, t.pod, 'vethB', 5, 'dual');
    macvlanNic(t.host, t.pod, 'br0', 'net1', 6, 'dual');
    const addB = await call(t, { command: 'ADD', conf: routerConf(v, prevResult(v, t)), containerId: cidB });
    expect(addB.code).toBe(0);
    const hostWithB = snapshot(t.host);

    const del = await call(t, { command: 'DEL', conf: routerConf(v, addA.out), containerId: cidA, netns: pathA });
    expect(del.code).toBe(0);
    expect(diff(hostWithB, snapshot(t.host))).toEqual([]);
    expect((await call(t, { command: 'CHECK', conf: routerConf(v, addB.out), containerId: cidB })).raw).toBe('');
    expect(pings(t.host, '10.6.1.5')).toBe(true);
    expect(pings(t.host, 'fd00:6::15')).toBe(true);
    expect((await call(t, { command: 'DEL', conf: routerConf(v, addB.out), containerId: cidB })).code).toBe(0);
  });
});
