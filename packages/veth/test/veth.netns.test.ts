/**
 * veth ADD/CHECK/DEL/GC in real network namespaces, every CNI version.
 * Assertions use iproute2's own view of the kernel and real traffic.
 */
import * as path from 'node:path';
import * as os from 'node:os';
import { readFileSync, rmSync } from 'node:fs';
import { addNet1, call, json, makeTopo, prevResult, sh, vethConf, VERSIONS, type Topo } from './helpers';
import { newNs as newTestNs, sh as shIn } from '@cnikit/netlib-testing';
import { hostVethName } from '../src/names';

jest.setTimeout(60_000);

interface IpRoute {
  dst: string;
  dev?: string;
  gateway?: string;
  prefsrc?: string;
  scope?: string;
  flags?: string[];
}
interface IpNeigh {
  dst: string;
  dev?: string;
  lladdr?: string;
  state?: string[];
}
interface IpRule {
  priority: number;
  src?: string;
  srclen?: number;
  table: string;
}
interface IpLink {
  ifname: string;
  address: string;
  ifalias?: string;
  operstate: string;
}

const at = (v: string): number => VERSIONS.indexOf(v as (typeof VERSIONS)[number]);

let t: Topo;
afterEach(async () => {
  await t?.cleanup();
});

async function hostLeftovers(topo: Topo): Promise<string[]> {
  const left: string[] = [];
  const links = await json<IpLink[]>(topo.host, 'ip -j link show');
  for (const l of links) if (l.ifname.startsWith('veth')) left.push(`link ${l.ifname}`);
  for (const n of await json<IpNeigh[]>(topo.host, 'ip -j neigh show'))
    if (n.dst === '10.6.1.5' || n.dst === 'fd00:6::15') left.push(`neigh ${n.dst}`);
  for (const r of await json<IpRoute[]>(topo.host, 'ip -j route show table all'))
    if (r.dst.startsWith('10.6.1.5') || r.dst.startsWith('10.7.1.5')) left.push(`route ${r.dst}`);
  return left;
}

describe.each(VERSIONS)('veth [%s]', (version) => {
  beforeEach(async () => {
    t = await makeTopo();
  });

  it('ADD wires host and Service paths, CHECK passes, DEL cleans and repeats', async () => {
    const prev = prevResult(version, 'eth0', [{ address: '10.6.1.5/16', gateway: '10.6.0.254' }], t.pod.path);
    const add = await call(t, { command: 'ADD', conf: vethConf(version, prev) });
    expect(add.code).toBe(0);
    expect(add.out?.['cniVersion']).toBe(version);
    const ifaces = add.out?.['interfaces'] as { name: string; mac: string; sandbox?: string }[];
    const hostName = hostVethName(t.containerId);
    expect(ifaces.map((i) => i.name)).toEqual(['eth0', hostName, 'veth0']);
    expect(ifaces[2]?.sandbox).toBe(t.pod.path);
    if (at(version) < at('1.0.0')) expect((add.out?.['ips'] as { version: string }[])[0]?.version).toBe('4');

    // Host side: the pair, its alias, the pod route and a permanent neighbour.
    const hostLink = (await json<IpLink[]>(t.host, `ip -j link show ${hostName}`))[0]!;
    expect(hostLink.ifalias).toBe(`cnikit-veth:mv-veth:${t.containerId}`);
    const hr = await json<IpRoute[]>(t.host, `ip -j route show 10.6.1.5/32`);
    expect(hr[0]?.dev).toBe(hostName);
    const hn = await json<IpNeigh[]>(t.host, `ip -j neigh show 10.6.1.5 dev ${hostName}`);
    expect(hn[0]?.state).toContain('PERMANENT');
    expect(hn[0]?.lladdr).toBe(ifaces[2]?.mac);

    // Pod side: host IP and hijacked subnets via veth0; the default stays on eth0.
    const pr = await json<IpRoute[]>(t.pod, 'ip -j route show');
    expect(pr.find((r) => r.dst === '10.6.0.1')?.dev).toBe('veth0');
    expect(pr.find((r) => r.dst === '10.96.0.0/12')).toMatchObject({ dev: 'veth0', gateway: '10.6.0.1', prefsrc: '10.6.1.5' });
    expect(pr.find((r) => r.dst === '10.244.0.0/16')?.dev).toBe('veth0');
    expect(pr.find((r) => r.dst === 'default')?.dev).toBe('eth0');
    const pn = await json<IpNeigh[]>(t.pod, 'ip -j neigh show 10.6.0.1 dev veth0');
    expect(pn[0]?.state).toContain('PERMANENT');
    expect(pn[0]?.lladdr).toBe(hostLink.address);
    expect((await sh(t.pod, 'cat /proc/sys/net/ipv4/conf/veth0/rp_filter')).trim()).toBe('2');
    expect((await sh(t.host, `cat /proc/sys/net/ipv4/conf/${hostName}/rp_filter`)).trim()).toBe('2');

    // Real traffic: the host's address and the "Service" on the host answer through veth0.
    await sh(t.pod, 'ping -c1 -W2 10.6.0.1');
    await sh(t.pod, 'ping -c1 -W2 10.96.0.10');

    if (at(version) >= at('0.4.0')) {
      const chk = await call(t, { command: 'CHECK', conf: vethConf(version, add.out) });
      expect(chk.raw).toBe('');
      expect(chk.code).toBe(0);
      // Break one object: CHECK names it.
      await sh(t.pod, 'ip route del 10.96.0.0/12');
      const bad = await call(t, { command: 'CHECK', conf: vethConf(version, add.out) });
      expect(bad.code).not.toBe(0);
      expect(bad.out?.['code']).toBe(102);
      expect(String(bad.out?.['details'])).toContain('10.96.0.0/12');
    } else {
      const chk = await call(t, { command: 'CHECK', conf: vethConf(version, add.out) });
      expect(chk.out?.['code']).toBe(1);
    }

    const del = await call(t, { command: 'DEL', conf: vethConf(version, add.out) });
    expect(del.raw).toBe('');
    expect(del.code).toBe(0);
    expect(await hostLeftovers(t)).toEqual([]);
    expect((await json<IpLink[]>(t.pod, 'ip -j link show')).map((l) => l.ifname)).not.toContain('veth0');
    const again = await call(t, { command: 'DEL', conf: vethConf(version, add.out) });
    expect(again.code).toBe(0);
  });

  it('DEL succeeds with the netns gone and without prevResult', async () => {
    const prev = prevResult(version, 'eth0', [{ address: '10.6.1.5/16' }], t.pod.path);
    expect((await call(t, { command: 'ADD', conf: vethConf(version, prev) })).code).toBe(0);
    await t.pod.cleanup();
    const del = await call(t, { command: 'DEL', conf: vethConf(version, undefined) });
    expect(del.code).toBe(0);
    expect(await hostLeftovers(t)).toEqual([]);
    expect((await call(t, { command: 'DEL', conf: vethConf(version, undefined), netns: '' })).code).toBe(0);
  });
});

describe('veth secondary interfaces', () => {
  beforeEach(async () => {
    t = await makeTopo();
    await addNet1(t);
  });

  it('net1 migrates to table 100 with a from rule; DEL of net1 keeps eth0 wired', async () => {
    const v = '1.1.0';
    const add0 = await call(t, { command: 'ADD', conf: vethConf(v, prevResult(v, 'eth0', [{ address: '10.6.1.5/16' }], t.pod.path)) });
    expect(add0.code).toBe(0);
    const prev1 = prevResult(v, 'net1', [{ address: '10.7.1.5/16' }], t.pod.path);
    const add1 = await call(t, { command: 'ADD', conf: vethConf(v, prev1), ifName: 'net1' });
    expect(add1.code).toBe(0);

    const rules = await json<IpRule[]>(t.pod, 'ip -j rule show');
    expect(rules.find((r) => r.src === '10.7.1.5' && r.table === '100')?.priority).toBe(100);
    const t100 = await json<IpRoute[]>(t.pod, 'ip -j route show table 100');
    expect(t100.find((r) => r.dst === '10.8.0.0/16')?.dev).toBe('net1');
    expect(t100.find((r) => r.dst === '10.96.0.0/12')).toMatchObject({ dev: 'veth0', prefsrc: '10.7.1.5' });
    const main = await json<IpRoute[]>(t.pod, 'ip -j route show');
    expect(main.find((r) => r.dst === '10.8.0.0/16')).toBeUndefined();
    expect(main.find((r) => r.dst === '10.96.0.0/12')?.prefsrc).toBe('10.6.1.5');
    // The host reaches both pod IPs through the pair.
    await sh(t.pod, 'ping -c1 -W2 -I 10.7.1.5 10.6.0.1');
    await sh(t.pod, 'ping -c1 -W2 10.96.0.10');

    const chk1 = await call(t, { command: 'CHECK', conf: vethConf(v, add1.out), ifName: 'net1' });
    expect(chk1.raw).toBe('');
    const chk0 = await call(t, { command: 'CHECK', conf: vethConf(v, add0.out) });
    expect(chk0.raw).toBe('');

    expect((await call(t, { command: 'DEL', conf: vethConf(v, add1.out), ifName: 'net1' })).code).toBe(0);
    expect((await json<IpRule[]>(t.pod, 'ip -j rule show')).find((r) => r.table === '100')).toBeUndefined();
    expect(await json<IpRoute[]>(t.pod, 'ip -j route show table 100')).toEqual([]);
    expect(await json<IpRoute[]>(t.host, 'ip -j route show 10.7.1.5/32')).toEqual([]);
    await sh(t.pod, 'ping -c1 -W2 10.6.0.1');
    expect((await call(t, { command: 'DEL', conf: vethConf(v, add0.out) })).code).toBe(0);
    expect(await hostLeftovers(t)).toEqual([]);
  });

  it('set up before eth0: name order decides, not call order: net1 still migrates and eth0 takes main', async () => {
    const v = '1.1.0';
    const add1 = await call(t, {
      command: 'ADD',
      conf: vethConf(v, prevResult(v, 'net1', [{ address: '10.7.1.5/16' }], t.pod.path)),
      ifName: 'net1',
    });
    expect(add1.code).toBe(0);
    // Before eth0's chain runs the pod already reaches its host through the pair.
    await sh(t.pod, 'ping -c1 -W2 10.96.0.10');
    const add0 = await call(t, { command: 'ADD', conf: vethConf(v, prevResult(v, 'eth0', [{ address: '10.6.1.5/16' }], t.pod.path)) });
    expect(add0.code).toBe(0);
    const main = await json<IpRoute[]>(t.pod, 'ip -j route show');
    expect(main.find((r) => r.dst === 'default')?.dev).toBe('eth0');
    expect(main.find((r) => r.dst === '10.96.0.0/12')?.prefsrc).toBe('10.6.1.5');
    const t100 = await json<IpRoute[]>(t.pod, 'ip -j route show table 100');
    expect(t100.find((r) => r.dst === '10.8.0.0/16')?.dev).toBe('net1');
    expect((await json<IpRule[]>(t.pod, 'ip -j rule show')).find((r) => r.src === '10.7.1.5')?.table).toBe('100');
    await sh(t.pod, 'ping -c1 -W2 -I 10.7.1.5 10.96.0.10');
    expect((await call(t, { command: 'CHECK', conf: vethConf(v, add0.out) })).raw).toBe('');
    expect((await call(t, { command: 'CHECK', conf: vethConf(v, add1.out), ifName: 'net1' })).raw).toBe('');
    expect((await call(t, { command: 'DEL', conf: vethConf(v, add0.out) })).code).toBe(0);
    expect((await call(t, { command: 'DEL', conf: vethConf(v, add1.out), ifName: 'net1' })).code).toBe(0);
    expect(await hostLeftovers(t)).toEqual([]);
  });
});

describe('veth dual-stack', () => {
  beforeEach(async () => {
    t = await makeTopo({ v6: true });
  });

  it('routes IPv4 and IPv6 through veth0', async () => {
    const v = '1.0.0';
    const prev = prevResult(v, 'eth0', [{ address: '10.6.1.5/16' }, { address: 'fd00:6::15/64' }], t.pod.path);
    const conf = vethConf(v, prev, {
      overlay_hijack_subnet: ['10.244.0.0/16', 'fd00:244::/64'],
      service_hijack_subnet: ['10.96.0.0/12', 'fd00:96::/108'],
    });
    const add = await call(t, { command: 'ADD', conf });
    expect(add.raw).not.toContain('"code"');
    expect(add.code).toBe(0);
    const pr6 = await json<IpRoute[]>(t.pod, 'ip -6 -j route show');
    expect(pr6.find((r) => r.dst === 'fd00:96::/108')).toMatchObject({ dev: 'veth0' });
    expect(pr6.find((r) => r.dst === 'fd00:96::/108')?.gateway).toMatch(/^fe80::/);
    expect(pr6.find((r) => r.dst === 'fd00:6::1')?.dev).toBe('veth0');
    const hn6 = await json<IpNeigh[]>(t.host, 'ip -6 -j neigh show fd00:6::15');
    expect(hn6[0]?.state).toContain('PERMANENT');
    await sh(t.pod, 'ping -6 -c1 -W2 fd00:6::1');
    await sh(t.pod, 'ping -6 -c1 -W2 fd00:96::10');
    await sh(t.pod, 'ping -c1 -W2 10.96.0.10');
    expect((await call(t, { command: 'CHECK', conf: { ...conf, prevResult: add.out } })).raw).toBe('');
    expect((await call(t, { command: 'DEL', conf: { ...conf, prevResult: add.out } })).code).toBe(0);
    expect(await hostLeftovers(t)).toEqual([]);
  });
});

describe('veth dual-stack with a secondary interface', () => {
  beforeEach(async () => {
    t = await makeTopo({ v6: true });
    await addNet1(t, { v6: true });
  });

  it('net1 gets IPv4 and IPv6 veth routes in table 100 and its replies use them', async () => {
    const v = '1.1.0';
    const extra = { overlay_hijack_subnet: ['10.244.0.0/16', 'fd00:244::/64'], service_hijack_subnet: ['10.96.0.0/12', 'fd00:96::/108'] };
    const add0 = await call(t, {
      command: 'ADD',
      conf: vethConf(v, prevResult(v, 'eth0', [{ address: '10.6.1.5/16' }, { address: 'fd00:6::15/64' }], t.pod.path), extra),
    });
    expect(add0.raw).not.toContain('"code"');
    const add1 = await call(t, {
      command: 'ADD',
      conf: vethConf(v, prevResult(v, 'net1', [{ address: '10.7.1.5/16' }, { address: 'fd00:7::15/64' }], t.pod.path), extra),
      ifName: 'net1',
    });
    expect(add1.raw).not.toContain('"code"');
    const t100 = await json<IpRoute[]>(t.pod, 'ip -6 -j route show table 100');
    expect(t100.find((r) => r.dst === 'fd00:96::/108')).toMatchObject({ dev: 'veth0', prefsrc: 'fd00:7::15' });
    const rules6 = await json<IpRule[]>(t.pod, 'ip -6 -j rule show');
    expect(rules6.find((r) => r.src === 'fd00:7::15' && r.table === '100')).toBeDefined();
    await sh(t.pod, 'ping -6 -c1 -W2 -I fd00:7::15 fd00:96::10');
    await sh(t.pod, 'ping -6 -c1 -W2 fd00:96::10');
    expect((await call(t, { command: 'CHECK', conf: vethConf(v, add1.out, extra), ifName: 'net1' })).raw).toBe('');
    expect((await call(t, { command: 'DEL', conf: vethConf(v, add1.out, extra), ifName: 'net1' })).code).toBe(0);
    expect((await call(t, { command: 'DEL', conf: vethConf(v, add0.out, extra) })).code).toBe(0);
    expect(await hostLeftovers(t)).toEqual([]);
  });
});

describe('veth GC and STATUS', () => {
  beforeEach(async () => {
    t = await makeTopo();
  });

  it('GC removes host ends of attachments not listed, and only ours', async () => {
    const v = '1.1.0';
    const add = await call(t, { command: 'ADD', conf: vethConf(v, prevResult(v, 'eth0', [{ address: '10.6.1.5/16' }], t.pod.path)) });
    expect(add.code).toBe(0);
    await sh(t.host, 'ip link add vethforeign type veth peer name vethforeign1');
    const keep = await call(t, {
      command: 'GC',
      conf: { ...vethConf(v, undefined), 'cni.dev/valid-attachments': [{ containerID: t.containerId, ifname: 'eth0' }] },
    });
    expect(keep.code).toBe(0);
    expect((await json<IpLink[]>(t.host, 'ip -j link show')).map((l) => l.ifname)).toContain(hostVethName(t.containerId));
    // Another network's GC never touches this network's links.
    expect(
      (await call(t, { command: 'GC', conf: { ...vethConf(v, undefined), name: 'other', 'cni.dev/valid-attachments': [] } })).code,
    ).toBe(0);
    expect((await json<IpLink[]>(t.host, 'ip -j link show')).map((l) => l.ifname)).toContain(hostVethName(t.containerId));
    const gc = await call(t, { command: 'GC', conf: { ...vethConf(v, undefined), 'cni.dev/valid-attachments': [] } });
    expect(gc.code).toBe(0);
    const names = (await json<IpLink[]>(t.host, 'ip -j link show')).map((l) => l.ifname);
    expect(names).not.toContain(hostVethName(t.containerId));
    expect(names).toContain('vethforeign');
  });

  it('STATUS succeeds on 1.1.0 and is refused below', async () => {
    expect((await call(t, { command: 'STATUS', conf: vethConf('1.1.0', undefined) })).code).toBe(0);
    expect((await call(t, { command: 'STATUS', conf: vethConf('1.0.0', undefined) })).out?.['code']).toBe(1);
  });
});

describe('veth bad input changes nothing', () => {
  beforeEach(async () => {
    t = await makeTopo();
  });

  const v = '1.1.0';
  it.each([
    ['missing prevResult', (): Record<string, unknown> => vethConf(v, undefined), 7],
    [
      'bad service CIDR',
      (): Record<string, unknown> =>
        vethConf(v, prevResult(v, 'eth0', [{ address: '10.6.1.5/16' }], '/x'), { service_hijack_subnet: ['10.96.0.0/99'] }),
      7,
    ],
    ['unknown cniVersion', (): Record<string, unknown> => vethConf('9.9.9', prevResult(v, 'eth0', [{ address: '10.6.1.5/16' }], '/x')), 1],
    ['prevResult without IPs', (): Record<string, unknown> => vethConf(v, { cniVersion: v, interfaces: [], ips: [] }), 7],
  ])('%s', async (_n, conf, code) => {
    const res = await call(t, { command: 'ADD', conf: conf() });
    expect(res.code).not.toBe(0);
    expect(res.out?.['code']).toBe(code);
    expect(typeof res.out?.['msg']).toBe('string');
    expect(await hostLeftovers(t)).toEqual([]);
  });

  // libcni deletes a chain in reverse and stops at the first error: a DEL that failed on the field ADD
  // rejected would keep macvlan and host-local from freeing the pod's NIC and lease.
  it('DEL succeeds on a config ADD rejected, cleans up, and logs the bad field as a warning', async () => {
    const logFile = path.join(os.tmpdir(), `cnikit-test-veth-del-${process.pid}.log`);
    const bad = { service_hijack_subnet: ['10.96.0.1/12'], log_options: { log_file: logFile } };
    const prev = prevResult(v, 'eth0', [{ address: '10.6.1.5/16' }], t.pod.path);
    expect((await call(t, { command: 'ADD', conf: vethConf(v, prev, bad) })).out?.['code']).toBe(7);
    const rejected = await call(t, { command: 'DEL', conf: vethConf(v, prev, bad) });
    expect(rejected).toMatchObject({ code: 0, raw: '' });

    // What an earlier ADD left (the config was edited since) is still found by container ID and removed.
    const add = await call(t, { command: 'ADD', conf: vethConf(v, prev) });
    expect(add.code).toBe(0);
    const del = await call(t, { command: 'DEL', conf: vethConf(v, add.out, bad) });
    expect(del).toMatchObject({ code: 0, raw: '' });
    expect(await hostLeftovers(t)).toEqual([]);
    expect((await json<IpLink[]>(t.pod, 'ip -j link show')).map((l) => l.ifname)).not.toContain('veth0');
    const lines = readFileSync(logFile, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    rmSync(logFile, { force: true });
    const warnings = lines.filter((l) => l['msg'] === 'DEL: config field ignored');
    expect(warnings.length).toBe(2);
    expect(warnings[0]).toMatchObject({ level: 'warn', containerId: t.containerId });
    expect(String(warnings[0]?.['warning'])).toContain('service_hijack_subnet');
  });

  it('absent netns', async () => {
    const res = await call(t, {
      command: 'ADD',
      conf: vethConf(v, prevResult(v, 'eth0', [{ address: '10.6.1.5/16' }], '/x')),
      netns: '/var/run/netns/does-not-exist',
    });
    expect(res.out?.['code']).toBe(3);
    expect(await hostLeftovers(t)).toEqual([]);
  });

  it('chained interface missing in the pod', async () => {
    const res = await call(t, {
      command: 'ADD',
      conf: vethConf(v, prevResult(v, 'net5', [{ address: '10.6.1.9/16' }], t.pod.path)),
      ifName: 'net5',
    });
    expect(res.out?.['code']).toBe(7);
    expect(await hostLeftovers(t)).toEqual([]);
  });

  it('no host IPv6 for an IPv6 pod: refused before any change', async () => {
    await sh(t.pod, 'sysctl -qw net.ipv6.conf.all.disable_ipv6=0 && ip addr add fd00:6::15/64 dev eth0 nodad');
    const prev = prevResult(v, 'eth0', [{ address: '10.6.1.5/16' }, { address: 'fd00:6::15/64' }], t.pod.path);
    const res = await call(t, { command: 'ADD', conf: vethConf(v, prev) });
    expect(res.code).not.toBe(0);
    expect(String(res.out?.['msg'])).toContain('IPv6');
    expect(await hostLeftovers(t)).toEqual([]);
  });

  it('a failure half-way unwinds every step, the migrated routes included', async () => {
    // A conflicting rule makes the last step (the from-rule of the migration) fail after the pair,
    // neighbours, host routes and the route migration are done.
    await sh(t.pod, 'ip rule add from 10.6.1.5/32 lookup 99 pref 99');
    const prev = prevResult(v, 'eth0', [{ address: '10.6.1.5/16' }], t.pod.path);
    const res = await call(t, { command: 'ADD', conf: vethConf(v, prev, { migrate_route: 1 }) });
    expect(res.code).not.toBe(0);
    expect(String(res.out?.['msg'])).toContain('EEXIST');
    expect(await hostLeftovers(t)).toEqual([]);
    expect((await json<IpLink[]>(t.pod, 'ip -j link show')).map((l) => l.ifname)).not.toContain('veth0');
    const main = await json<IpRoute[]>(t.pod, 'ip -j route show');
    expect(main.find((r) => r.dst === 'default')?.dev).toBe('eth0');
    expect(await json<IpRoute[]>(t.pod, 'ip -j route show table 99')).toEqual([]);
  });
});

describe('veth DEL of a config that ADD rejects', () => {
  beforeEach(async () => {
    t = await makeTopo();
  });

  const v = '1.1.0';
  // Fields that only shape what ADD creates: DEL finds the host veth by the container ID.
  const bad = { service_hijack_subnet: ['10.96.0.1/12'], rp_filter: { value: 7 }, mac_prefix: 'zz', ip_conflict: { enabled: 'yes' } };

  it('ADD is refused (code 7); DEL succeeds, removes what an earlier ADD left, and logs each bad field as a warning', async () => {
    const logFile = path.join(os.tmpdir(), `cnikit-test-veth-baddel-${process.pid}.log`);
    rmSync(logFile, { force: true });
    const prev = prevResult(v, 'eth0', [{ address: '10.6.1.5/16', gateway: '10.6.0.254' }], t.pod.path);
    expect((await call(t, { command: 'ADD', conf: vethConf(v, prev) })).code).toBe(0);
    const conf = vethConf(v, prev, { ...bad, log_options: { log_file: logFile } });
    const refused = await call(t, { command: 'ADD', conf, containerId: `${t.containerId}x` });
    expect(refused.out).toMatchObject({ code: 7 });

    const del = await call(t, { command: 'DEL', conf });
    expect({ code: del.code, raw: del.raw }).toEqual({ code: 0, raw: '' });
    expect(await hostLeftovers(t)).toEqual([]);
    const warnings = readFileSync(logFile, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { level: string; msg: string; warning?: string })
      .filter((l) => l.level === 'warn');
    for (const field of ['service_hijack_subnet[0]', 'rp_filter.value', 'mac_prefix', 'ip_conflict.enabled']) {
      expect(warnings).toContainEqual(
        expect.objectContaining({ msg: 'DEL: config field ignored', warning: expect.stringContaining(`"${field}"`) }),
      );
    }
    expect((await call(t, { command: 'DEL', conf: vethConf(v, undefined, bad) })).code).toBe(0);
    expect((await call(t, { command: 'DEL', conf: vethConf(v, { cniVersion: v, ips: 'nonsense' }, bad), netns: '' })).code).toBe(0);
    rmSync(logFile, { force: true });
  });
});

describe('veth stale DEL (the runtime re-created the sandbox)', () => {
  beforeEach(async () => {
    t = await makeTopo();
  });

  it("DEL of the old container ID, with its netns gone, leaves the new sandbox's pair alone even when the IDs share the name prefix", async () => {
    const v = '1.0.0';
    // The host end is named from the first 11 characters of the ID: these two get the same name.
    const cidA = `${t.containerId.slice(0, 11)}aaaa`;
    const cidB = `${t.containerId.slice(0, 11)}bbbb`;
    expect(hostVethName(cidA)).toBe(hostVethName(cidB));
    const pathA = t.pod.path;
    const prevA = prevResult(v, 'eth0', [{ address: '10.6.1.5/16', gateway: '10.6.0.254' }], pathA);
    const addA = await call(t, { command: 'ADD', conf: vethConf(v, prevA), containerId: cidA });
    expect(addA.code).toBe(0);

    // Sandbox A dies with its netns (its pair goes with it); sandbox B gets the same address.
    const b = newTestNs('vp');
    await sh(t.host, `ip link add mvb link br0 type macvlan mode bridge && ip link set mvb netns ${b.name}`);
    shIn(
      b.ns,
      'ip link set mvb name eth0 && ip addr add 10.6.1.5/16 dev eth0 && ip link set eth0 up && ip route add default via 10.6.0.254 dev eth0 onlink',
    );
    await t.pod.cleanup();
    // The kernel destroys a deleted namespace's devices asynchronously: A's host end goes a moment later.
    for (let i = 0; i < 100 && (await json<IpLink[]>(t.host, 'ip -j link show')).some((l) => l.ifname === hostVethName(cidA)); i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    const prevB = prevResult(v, 'eth0', [{ address: '10.6.1.5/16', gateway: '10.6.0.254' }], b.ns.path);
    const addB = await call(t, { command: 'ADD', conf: vethConf(v, prevB), containerId: cidB, netns: b.ns.path });
    expect(addB.code).toBe(0);

    const del = await call(t, { command: 'DEL', conf: vethConf(v, addA.out), containerId: cidA, netns: pathA });
    expect(del.code).toBe(0);
    const hostLinks = await json<IpLink[]>(t.host, 'ip -j link show');
    expect(hostLinks.map((l) => l.ifname)).toContain(hostVethName(cidB));
    expect(await json<IpRoute[]>(t.host, 'ip -j route show 10.6.1.5')).toEqual([expect.objectContaining({ dev: hostVethName(cidB) })]);
    expect((await call(t, { command: 'CHECK', conf: vethConf(v, addB.out), containerId: cidB, netns: b.ns.path })).raw).toBe('');
    shIn(b.ns, 'ping -c1 -W2 10.6.0.1 >/dev/null');

    expect((await call(t, { command: 'DEL', conf: vethConf(v, addB.out), containerId: cidB, netns: b.ns.path })).code).toBe(0);
    expect(await hostLeftovers(t)).toEqual([]);
    b.cleanup();
  });
});

describe('veth ip_conflict and mac_prefix', () => {
  beforeEach(async () => {
    t = await makeTopo();
  });
  const v = '1.1.0';
  const prev = (): Record<string, unknown> => prevResult(v, 'eth0', [{ address: '10.6.1.5/16' }], t.pod.path);

  it('passes when nobody else answers for the pod IP', async () => {
    const res = await call(t, {
      command: 'ADD',
      conf: vethConf(v, prev(), { ip_conflict: { enabled: true, interval: '100ms', retries: 2 } }),
    });
    expect(res.code).toBe(0);
  });

  it('refuses when another host on the segment owns the pod IP, leaving nothing', async () => {
    // A rogue neighbour: a macvlan of the same bridge in its own namespace, holding the pod's address.
    const rogue = await (await import('./helpers')).makeRogue(t, '10.6.1.5/16');
    expect(rogue).toBe('ok');
    const res = await call(t, {
      command: 'ADD',
      conf: vethConf(v, prev(), { ip_conflict: { enabled: true, interval: '200ms', retries: 3 } }),
    });
    expect(res.code).not.toBe(0);
    expect(res.out?.['code']).toBe(101);
    expect(String(res.out?.['details'])).toContain('10.6.1.5');
    expect((await json<IpLink[]>(t.host, 'ip -j link show')).map((l) => l.ifname).filter((n) => n.startsWith('veth'))).toEqual([]);
  });

  it('mac_prefix sets the chained interface MAC from its IPv4 and reports it', async () => {
    const res = await call(t, { command: 'ADD', conf: vethConf(v, prev(), { mac_prefix: '0a:1b' }) });
    expect(res.code).toBe(0);
    const eth0 = (await json<IpLink[]>(t.pod, 'ip -j link show eth0'))[0]!;
    expect(eth0.address).toBe('0a:1b:0a:06:01:05');
    expect((res.out?.['interfaces'] as { name: string; mac: string }[])[0]?.mac).toBe('0a:1b:0a:06:01:05');
  });
});
