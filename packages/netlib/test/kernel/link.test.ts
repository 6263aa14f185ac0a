import { existsSync } from 'node:fs';
import { isExistsError, isNotFoundError, LinkNotFoundError, NetlinkError } from '../../src/errors';
import * as link from '../../src/link';
import { ipJson } from '@cnikit/netlib-testing';
import { rejection, useNamespaces } from './fixture';

const t = useNamespaces();

interface IpLink {
  ifindex: number;
  ifname: string;
  mtu: number;
  address: string;
  flags: string[];
  ifalias?: string;
  master?: string;
  link_index?: number;
  link_netnsid?: number;
  linkinfo?: { info_kind: string; info_data?: Record<string, unknown> };
}
const ipLinks = (ns: Parameters<typeof ipJson>[0]): IpLink[] => ipJson<IpLink[]>(ns, '-d link show');
const ipLink = (ns: Parameters<typeof ipJson>[0], name: string): IpLink | undefined => ipLinks(ns).find((l) => l.ifname === name);

describe('lookups', () => {
  test('list and get agree with ip link', async () => {
    const lo = await link.get(t.host.ns, 'lo');
    expect(lo).toMatchObject({ index: 1, name: 'lo', mtu: 65536, mac: '00:00:00:00:00:00', up: true });
    expect(lo.kind).toBeUndefined();
    expect(await link.get(t.host.ns, 1)).toEqual(lo);
    expect(await link.list(t.host.ns)).toEqual([lo]);
    expect(ipLinks(t.host.ns).map((l) => l.ifname)).toEqual(['lo']);
  });

  test('an absent link is LinkNotFoundError (find: undefined)', async () => {
    for (const ref of ['eth9', 4242]) {
      const err = await rejection(link.get(t.host.ns, ref));
      expect(err).toBeInstanceOf(LinkNotFoundError);
      expect(err).toBeInstanceOf(NetlinkError);
      expect(err.errno).toBe('ENODEV');
      expect(isNotFoundError(err)).toBe(true);
      expect(await link.find(t.host.ns, ref)).toBeUndefined();
    }
    expect((await rejection(link.get(t.host.ns, 'eth9'))).message).toBe('netlink: find link eth9: ENODEV');
  });
});

describe('veth', () => {
  test('a pair with its peer created directly in another namespace', async () => {
    const { link: host, peer } = await link.addVeth(t.host.ns, {
      name: 'veth-h',
      peerName: 'eth0',
      peerNs: t.ctr.ns,
      mtu: 1450,
      mac: '02:00:00:00:00:01',
      peerMac: '02:00:00:00:00:02',
    });
    expect(host).toMatchObject({ name: 'veth-h', kind: 'veth', mtu: 1450, mac: '02:00:00:00:00:01', up: false });
    expect(peer).toMatchObject({ name: 'eth0', kind: 'veth', mtu: 1450, mac: '02:00:00:00:00:02' });
    // Each end points at the other's index, in the other namespace.
    expect(host.peerIndex).toBe(peer.index);
    expect(peer.peerIndex).toBe(host.index);
    expect(host.linkNetnsId).toBeDefined();
    // The peer never existed in the host namespace.
    expect(ipLink(t.host.ns, 'eth0')).toBeUndefined();
    const ipPeer = ipLink(t.ctr.ns, 'eth0')!;
    expect(ipPeer).toMatchObject({ ifindex: peer.index, mtu: 1450, address: '02:00:00:00:00:02', link_index: host.index });
    expect(ipPeer.linkinfo?.info_kind).toBe('veth');
    expect(ipLink(t.host.ns, 'veth-h')).toMatchObject({ ifindex: host.index, mtu: 1450, address: '02:00:00:00:00:01' });
  });

  test('a pair in a single namespace, and EEXIST on a taken name', async () => {
    const { link: a, peer: b } = await link.addVeth(t.host.ns, { name: 'va', peerName: 'vb' });
    expect(a.peerIndex).toBe(b.index);
    expect(a.linkNetnsId).toBeUndefined();
    expect(
      ipLinks(t.host.ns)
        .map((l) => l.ifname)
        .sort(),
    ).toEqual(['lo', 'va', 'vb']);
    const err = await rejection(link.addVeth(t.host.ns, { name: 'va', peerName: 'vc' }));
    expect(err).toBeInstanceOf(NetlinkError);
    expect(err.errno).toBe('EEXIST');
    expect(isExistsError(err)).toBe(true);
    expect(err.message).toBe('netlink: add link va type veth peer vc: EEXIST');
  });
});

describe('changes', () => {
  beforeEach(async () => {
    await link.addVeth(t.host.ns, { name: 'v0', peerName: 'v1' });
  });

  test('up and down, by name and by index', async () => {
    await link.setUp(t.host.ns, 'v0');
    expect(ipLink(t.host.ns, 'v0')!.flags).toContain('UP');
    expect((await link.get(t.host.ns, 'v0')).up).toBe(true);
    const { index } = await link.get(t.host.ns, 'v0');
    await link.setDown(t.host.ns, index);
    expect(ipLink(t.host.ns, 'v0')!.flags).not.toContain('UP');
    expect((await link.get(t.host.ns, 'v0')).up).toBe(false);
    // Both ends up: carrier, so the operational state becomes up.
    await link.setUp(t.host.ns, 'v0');
    await link.setUp(t.host.ns, 'v1');
    expect((await link.get(t.host.ns, 'v0')).operState).toBe('up');
  });

  test('MTU, MAC and alias', async () => {
    await link.setMtu(t.host.ns, 'v0', 1280);
    await link.setMac(t.host.ns, 'v0', '02:aa:bb:cc:dd:ee');
    await link.setAlias(t.host.ns, 'v0', 'cni:test:abc');
    expect(ipLink(t.host.ns, 'v0')).toMatchObject({ mtu: 1280, address: '02:aa:bb:cc:dd:ee', ifalias: 'cni:test:abc' });
    expect(await link.get(t.host.ns, 'v0')).toMatchObject({ mtu: 1280, mac: '02:aa:bb:cc:dd:ee', alias: 'cni:test:abc' });
    expect((await link.findByAlias(t.host.ns, 'cni:test:abc'))?.name).toBe('v0');
    expect(await link.findByAlias(t.host.ns, 'cni:test')).toBeUndefined();
    await link.setAlias(t.host.ns, 'v0', '');
    expect(ipLink(t.host.ns, 'v0')!.ifalias).toBeUndefined();
    expect((await link.get(t.host.ns, 'v0')).alias).toBeUndefined();
    expect(await rejection(link.setMac(t.host.ns, 'v0', 'nope'))).toBeInstanceOf(TypeError);
    expect((await rejection(link.setMtu(t.host.ns, 'v0', 10))).errno).toBe('EINVAL');
  });

  test('rename keeps the index; EEXIST on a taken name', async () => {
    const before = await link.get(t.host.ns, 'v0');
    await link.rename(t.host.ns, 'v0', 'renamed0');
    expect(ipLink(t.host.ns, 'v0')).toBeUndefined();
    expect(ipLink(t.host.ns, 'renamed0')!.ifindex).toBe(before.index);
    expect((await link.get(t.host.ns, 'renamed0')).index).toBe(before.index);
    await link.rename(t.host.ns, before.index, 'v0');
    expect(ipLink(t.host.ns, 'v0')!.ifindex).toBe(before.index);
    const err = await rejection(link.rename(t.host.ns, 'v0', 'v1'));
    expect(err.errno).toBe('EEXIST');
    expect(err.message).toBe('netlink: set link v0 name v1: EEXIST');
  });

  test('enslave to a bridge and release', async () => {
    const br = await link.add(t.host.ns, { name: 'br0', kind: 'bridge', mtu: 1400 });
    expect(br).toMatchObject({ name: 'br0', kind: 'bridge', mtu: 1400 });
    await link.setMaster(t.host.ns, 'v0', br.index);
    expect(ipLink(t.host.ns, 'v0')!.master).toBe('br0');
    expect((await link.get(t.host.ns, 'v0')).masterIndex).toBe(br.index);
    await link.setMaster(t.host.ns, 'v0', 0);
    expect(ipLink(t.host.ns, 'v0')!.master).toBeUndefined();
    expect((await link.get(t.host.ns, 'v0')).masterIndex).toBeUndefined();
  });

  test('move to another namespace', async () => {
    await link.moveToNetns(t.host.ns, 'v1', t.ctr.ns);
    expect(ipLink(t.host.ns, 'v1')).toBeUndefined();
    expect(ipLink(t.ctr.ns, 'v1')).toBeDefined();
    expect(await link.find(t.host.ns, 'v1')).toBeUndefined();
    const moved = await link.get(t.ctr.ns, 'v1');
    expect(moved.peerIndex).toBe((await link.get(t.host.ns, 'v0')).index);
    expect(moved.linkNetnsId).toBeDefined();
  });

  test('delete removes both ends; deleting again is ENODEV (a not-found error)', async () => {
    await link.del(t.host.ns, 'v0');
    expect(ipLinks(t.host.ns).map((l) => l.ifname)).toEqual(['lo']);
    const err = await rejection(link.del(t.host.ns, 'v0'));
    expect(err).toBeInstanceOf(NetlinkError);
    expect(err.errno).toBe('ENODEV');
    expect(isNotFoundError(err)).toBe(true);
    expect(err.message).toBe('netlink: del link v0: ENODEV');
  });

  test('changing an absent link is ENODEV', async () => {
    for (const p of [link.setUp(t.host.ns, 'nope'), link.setMtu(t.host.ns, 999, 1400), link.moveToNetns(t.host.ns, 'nope', t.ctr.ns)]) {
      const err = await rejection(p);
      expect(err).toBeInstanceOf(NetlinkError);
      expect(err.errno).toBe('ENODEV');
    }
    expect(await rejection(link.rename(t.host.ns, 'nope', 'x'))).toBeInstanceOf(LinkNotFoundError);
  });
});

describe('other kinds', () => {
  test('ifb and bridge', async () => {
    const ifb = await link.add(t.host.ns, { name: 'ifb0', kind: 'ifb' });
    expect(ifb.kind).toBe('ifb');
    expect(ipLink(t.host.ns, 'ifb0')!.linkinfo?.info_kind).toBe('ifb');
    const br = await link.add(t.host.ns, { name: 'br1', kind: 'bridge', mac: '02:00:00:00:01:01' });
    expect(ipLink(t.host.ns, 'br1')).toMatchObject({ address: '02:00:00:00:01:01', linkinfo: { info_kind: 'bridge' } });
    expect(br.mac).toBe('02:00:00:00:01:01');
    expect((await rejection(link.add(t.host.ns, { name: 'br1', kind: 'bridge' }))).errno).toBe('EEXIST');
  });

  test('macvlan on a parent, created directly in the container namespace', async () => {
    const { link: parent } = await link.addVeth(t.host.ns, { name: 'up0', peerName: 'up1' });
    const mv = await link.add(t.host.ns, {
      name: 'mv0',
      kind: 'macvlan',
      parentIndex: parent.index,
      mode: 'bridge',
      mtu: 1400,
      targetNs: t.ctr.ns,
    });
    expect(mv).toMatchObject({ name: 'mv0', kind: 'macvlan', mtu: 1400 });
    expect(ipLink(t.host.ns, 'mv0')).toBeUndefined();
    const ip = ipLink(t.ctr.ns, 'mv0')!;
    expect(ip.linkinfo).toMatchObject({ info_kind: 'macvlan', info_data: { mode: 'bridge' } });
    const priv = await link.add(t.host.ns, { name: 'mv1', kind: 'macvlan', parentIndex: parent.index, mode: 'private' });
    expect(priv.peerIndex).toBe(parent.index);
    expect(ipLink(t.host.ns, 'mv1')!.linkinfo).toMatchObject({ info_data: { mode: 'private' } });
  });

  test('a kind the kernel lacks is a NetlinkError', async () => {
    if (existsSync('/sys/module/dummy')) {
      expect((await link.add(t.host.ns, { name: 'd0', kind: 'dummy' })).kind).toBe('dummy');
      return;
    }
    const err = await rejection(link.add(t.host.ns, { name: 'd0', kind: 'dummy' }));
    expect(err).toBeInstanceOf(NetlinkError);
    expect(err.errno).toBe('EOPNOTSUPP');
    expect(err.message).toBe('netlink: add link d0 type dummy: EOPNOTSUPP');
  });
});
