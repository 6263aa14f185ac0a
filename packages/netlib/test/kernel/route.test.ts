import { execFileSync } from 'node:child_process';
import { isExistsError, isNotFoundError, NetlinkError } from '../../src/errors';
import * as addr from '../../src/addr';
import * as link from '../../src/link';
import * as route from '../../src/route';
import { ipJson } from '@cnikit/netlib-testing';
import { rejection, useNamespaces } from './fixture';

const t = useNamespaces();

interface IpRoute {
  dst: string;
  gateway?: string;
  dev?: string;
  protocol?: string;
  scope?: string;
  metric?: number;
  prefsrc?: string;
  flags: string[];
  table?: string;
  type?: string;
}
const ipRoutes = (args: string): IpRoute[] => ipJson<IpRoute[]>(t.ctr.ns, `${args}`);

let eth0: link.Link;
beforeEach(async () => {
  ({ peer: eth0 } = await link.addVeth(t.host.ns, { name: 'veth0', peerName: 'eth0', peerNs: t.ctr.ns }));
  await link.setUp(t.ctr.ns, 'eth0');
  await link.setUp(t.host.ns, 'veth0');
  await addr.add(t.ctr.ns, eth0.index, '10.1.0.5/24');
  await addr.add(t.ctr.ns, eth0.index, 'fd00:1::5/64', { noDad: true });
});

describe('IPv4', () => {
  test('add via a gateway in main, list, replace, delete', async () => {
    await route.add(t.ctr.ns, { dst: '10.9.0.0/16', gw: '10.1.0.1', oif: eth0.index, metric: 50 });
    expect(ipRoutes('route show')).toContainEqual(
      expect.objectContaining({ dst: '10.9.0.0/16', gateway: '10.1.0.1', dev: 'eth0', metric: 50 }), // ip hides protocol boot
    );
    const listed = (await route.list(t.ctr.ns, { family: 4 })).find((r) => r.dst === '10.9.0.0/16');
    expect(listed).toEqual({
      dst: '10.9.0.0/16',
      family: 4,
      gw: '10.1.0.1',
      oif: eth0.index,
      table: 254,
      protocol: 3,
      scope: 0,
      type: 1,
      metric: 50,
    });
    await route.replace(t.ctr.ns, { dst: '10.9.0.0/16', gw: '10.1.0.2', oif: eth0.index, metric: 50 });
    expect(ipRoutes('route show 10.9.0.0/16')).toEqual([expect.objectContaining({ gateway: '10.1.0.2' })]);
    await route.del(t.ctr.ns, { dst: '10.9.0.0/16', metric: 50 });
    expect(ipRoutes('route show 10.9.0.0/16')).toEqual([]);
  });

  test('default route, link-scope route, onlink gateway, preferred source, protocol', async () => {
    await route.add(t.ctr.ns, { dst: 'default', gw: '10.1.0.1' });
    await route.add(t.ctr.ns, { dst: '192.168.5.0/24', oif: eth0.index, src: '10.1.0.5' });
    await route.add(t.ctr.ns, { dst: '172.16.0.0/12', gw: '169.254.1.1', oif: eth0.index, onlink: true, protocol: 77 });
    const ip = ipRoutes('route show');
    expect(ip).toContainEqual(expect.objectContaining({ dst: 'default', gateway: '10.1.0.1', dev: 'eth0' }));
    expect(ip).toContainEqual(expect.objectContaining({ dst: '192.168.5.0/24', dev: 'eth0', scope: 'link', prefsrc: '10.1.0.5' }));
    expect(ip).toContainEqual(expect.objectContaining({ dst: '172.16.0.0/12', gateway: '169.254.1.1', flags: ['onlink'], protocol: '77' }));
    const listed = await route.list(t.ctr.ns, { family: 4, oif: eth0.index });
    expect(listed).toContainEqual(expect.objectContaining({ dst: 'default', gw: '10.1.0.1' }));
    expect(listed).toContainEqual(expect.objectContaining({ dst: '192.168.5.0/24', scope: 253, src: '10.1.0.5' }));
    expect(listed).toContainEqual(expect.objectContaining({ dst: '172.16.0.0/12', onlink: true, protocol: 77 }));
    // The kernel's own prefix route for the address.
    expect(listed).toContainEqual(expect.objectContaining({ dst: '10.1.0.0/24', protocol: 2, scope: 253, src: '10.1.0.5' }));
    await route.del(t.ctr.ns, { dst: 'default' });
    expect(ipRoutes('route show default')).toEqual([]);
  });

  test('tables 116 and 1000 (above 255, carried in RTA_TABLE)', async () => {
    await route.add(t.ctr.ns, { dst: '10.50.0.0/24', gw: '10.1.0.1', table: 116 });
    await route.add(t.ctr.ns, { dst: 'default', gw: '10.1.0.1', table: 1000 });
    expect(ipRoutes('route show table 116')).toEqual([expect.objectContaining({ dst: '10.50.0.0/24', gateway: '10.1.0.1' })]);
    expect(ipRoutes('route show table 1000')).toEqual([expect.objectContaining({ dst: 'default', gateway: '10.1.0.1' })]);
    expect(await route.list(t.ctr.ns, { table: 1000 })).toEqual([expect.objectContaining({ dst: 'default', table: 1000, gw: '10.1.0.1' })]);
    expect(await route.list(t.ctr.ns, { table: 116 })).toEqual([expect.objectContaining({ dst: '10.50.0.0/24', table: 116 })]);
    expect((await route.list(t.ctr.ns)).some((r) => r.table !== 254)).toBe(false);
    const all = await route.list(t.ctr.ns, { table: 0 });
    expect(new Set(all.map((r) => r.table))).toEqual(new Set([116, 1000, 254, 255]));
    expect(all).toContainEqual(expect.objectContaining({ dst: '10.1.0.5/32', table: 255, type: route.RTN.LOCAL }));
    await route.del(t.ctr.ns, { dst: 'default', table: 1000 });
    expect(ipRoutes('route show table 1000')).toEqual([]);
    const gone = await rejection(route.del(t.ctr.ns, { dst: 'default', table: 1000 }));
    expect(gone.errno).toBe('ESRCH');
    expect(isNotFoundError(gone)).toBe(true);
  });

  test('get returns the route the kernel would use', async () => {
    await route.add(t.ctr.ns, { dst: '10.9.0.0/16', gw: '10.1.0.1' });
    expect(await route.get(t.ctr.ns, '10.9.3.4')).toMatchObject({
      dst: '10.9.3.4/32',
      gw: '10.1.0.1',
      oif: eth0.index,
      src: '10.1.0.5',
      table: 254,
    });
    expect(await route.get(t.ctr.ns, '10.1.0.77')).toMatchObject({ oif: eth0.index, src: '10.1.0.5' });
    expect((await rejection(route.get(t.ctr.ns, '8.8.8.8'))).errno).toBe('ENETUNREACH');
  });
});

describe('IPv6', () => {
  test('add via a gateway, default route, list, delete', async () => {
    await route.add(t.ctr.ns, { dst: 'fd00:9::/48', gw: 'fd00:1::1', metric: 10 });
    await route.add(t.ctr.ns, { dst: 'default', gw: 'fd00:1::1', oif: eth0.index });
    const ip = ipJson<IpRoute[]>(t.ctr.ns, '-6 route show');
    expect(ip).toContainEqual(expect.objectContaining({ dst: 'fd00:9::/48', gateway: 'fd00:1::1', dev: 'eth0', metric: 10 }));
    expect(ip).toContainEqual(expect.objectContaining({ dst: 'default', gateway: 'fd00:1::1' }));
    const listed = await route.list(t.ctr.ns, { family: 6 });
    expect(listed).toContainEqual({
      dst: 'fd00:9::/48',
      family: 6,
      gw: 'fd00:1::1',
      oif: eth0.index,
      table: 254,
      protocol: 3,
      scope: 0,
      type: 1,
      metric: 10,
    });
    expect(listed).toContainEqual(expect.objectContaining({ dst: 'default', family: 6, gw: 'fd00:1::1' }));
    expect(listed.every((r) => r.family === 6)).toBe(true);
    expect(await route.get(t.ctr.ns, 'fd00:9::1')).toMatchObject({ gw: 'fd00:1::1', oif: eth0.index });
    await route.del(t.ctr.ns, { dst: 'fd00:9::/48', gw: 'fd00:1::1' });
    await route.del(t.ctr.ns, { dst: 'default', family: 6 });
    expect(ipJson<IpRoute[]>(t.ctr.ns, '-6 route show').map((r) => r.dst)).not.toContain('fd00:9::/48');
    expect(ipJson<IpRoute[]>(t.ctr.ns, '-6 route show').map((r) => r.dst)).not.toContain('default');
  });

  test('table 1000 and replace', async () => {
    await route.add(t.ctr.ns, { dst: 'fd00:20::/64', oif: eth0.index, table: 1000 });
    await route.replace(t.ctr.ns, { dst: 'fd00:20::/64', gw: 'fd00:1::2', table: 1000 });
    expect(ipJson<IpRoute[]>(t.ctr.ns, '-6 route show table 1000')).toEqual([
      expect.objectContaining({ dst: 'fd00:20::/64', gateway: 'fd00:1::2' }),
    ]);
    expect(await route.list(t.ctr.ns, { table: 1000, family: 6 })).toEqual([
      expect.objectContaining({ dst: 'fd00:20::/64', gw: 'fd00:1::2', table: 1000 }),
    ]);
  });
});

describe('multipath', () => {
  let eth1: link.Link;
  beforeEach(async () => {
    ({ peer: eth1 } = await link.addVeth(t.host.ns, { name: 'veth1', peerName: 'eth1', peerNs: t.ctr.ns }));
    await link.setUp(t.ctr.ns, 'eth1');
    await addr.add(t.ctr.ns, eth1.index, '10.2.0.5/24');
    await addr.add(t.ctr.ns, eth1.index, 'fd00:2::5/64', { noDad: true });
  });

  test('IPv6 ECMP (two gateways, same metric, added without NLM_F_EXCL) is listed with its next hops', async () => {
    // What Go's netlink.RouteAddEcmp does (the reference plugins' ConfigureIface): the second default joins the first.
    await route.add(t.ctr.ns, { dst: 'default', gw: 'fd00:1::1', oif: eth0.index });
    execFileSync('ip', ['-n', t.ctr.name, '-6', 'route', 'prepend', 'default', 'via', 'fd00:2::1', 'dev', 'eth1']);
    const [def] = (await route.list(t.ctr.ns, { family: 6 })).filter((r) => r.dst === 'default');
    expect(def).toMatchObject({ dst: 'default', family: 6, metric: 1024 });
    expect(def!.oif).toBeUndefined();
    expect(def!.nexthops).toEqual([
      { gw: 'fd00:1::1', oif: eth0.index, weight: 1 },
      { gw: 'fd00:2::1', oif: eth1.index, weight: 1 },
    ]);
  });

  test('IPv4 multipath: add, list, replace by one of its next hops', async () => {
    const nexthops = [
      { gw: '10.1.0.1', oif: eth0.index, weight: 1 },
      { gw: '10.2.0.1', oif: eth1.index, weight: 3 },
    ];
    await route.add(t.ctr.ns, { dst: '10.9.0.0/16', nexthops });
    const ip = ipRoutes('route show 10.9.0.0/16');
    expect(ip.map((r) => (r as { nexthops?: { gateway: string; dev: string; weight: number }[] }).nexthops)).toEqual([
      [
        expect.objectContaining({ gateway: '10.1.0.1', dev: 'eth0', weight: 1 }),
        expect.objectContaining({ gateway: '10.2.0.1', dev: 'eth1', weight: 3 }),
      ],
    ]);
    const [listed] = await route.list(t.ctr.ns, { family: 4 }).then((l) => l.filter((r) => r.dst === '10.9.0.0/16'));
    expect(listed).toMatchObject({ dst: '10.9.0.0/16', scope: 0, nexthops });
    await route.replace(t.ctr.ns, { dst: '10.9.0.0/16', gw: '10.2.0.1', oif: eth1.index });
    expect(ipRoutes('route show 10.9.0.0/16')).toEqual([expect.objectContaining({ gateway: '10.2.0.1', dev: 'eth1' })]);
  });
});

describe('errors', () => {
  test('EEXIST on a duplicate, ESRCH on deleting an absent route, with descriptive messages', async () => {
    await route.add(t.ctr.ns, { dst: '10.1.0.0/24', gw: '10.1.0.1', table: 116 });
    const dup = await rejection(route.add(t.ctr.ns, { dst: '10.1.0.0/24', gw: '10.1.0.1', table: 116 }));
    expect(dup).toBeInstanceOf(NetlinkError);
    expect(isExistsError(dup)).toBe(true);
    expect(dup.message).toBe('netlink: add route 10.1.0.0/24 via 10.1.0.1 table 116: EEXIST');
    await route.add(t.ctr.ns, { dst: 'fd00:30::/64', gw: 'fd00:1::1' });
    expect((await rejection(route.add(t.ctr.ns, { dst: 'fd00:30::/64', gw: 'fd00:1::1' }))).errno).toBe('EEXIST');
    const v4gone = await rejection(route.del(t.ctr.ns, { dst: '10.77.0.0/16' }));
    expect(v4gone.errno).toBe('ESRCH');
    expect(isNotFoundError(v4gone)).toBe(true);
    expect(v4gone.message).toBe('netlink: del route 10.77.0.0/16 table 254: ESRCH');
    const v6gone = await rejection(route.del(t.ctr.ns, { dst: 'fd00:77::/64' }));
    expect(isNotFoundError(v6gone)).toBe(true);
    expect((await rejection(route.add(t.ctr.ns, { dst: '10.60.0.0/24', gw: '10.99.0.1' }))).errno).toBe('ENETUNREACH');
    expect(await rejection(route.add(t.ctr.ns, { dst: '10.60.0.0/24', gw: 'fd00::1', family: 4 }))).toBeInstanceOf(Error);
  });
});
