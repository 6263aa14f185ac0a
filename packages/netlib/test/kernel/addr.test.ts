import { isExistsError, isNotFoundError, NetlinkError } from '../../src/errors';
import * as addr from '../../src/addr';
import * as link from '../../src/link';
import { eventually, ipJson } from '@cnikit/netlib-testing';
import { rejection, useNamespaces } from './fixture';

const t = useNamespaces();

interface IpAddr {
  ifname: string;
  addr_info: Array<{
    family: string;
    local: string;
    prefixlen: number;
    broadcast?: string;
    scope: string;
    nodad?: boolean;
    tentative?: boolean;
  }>;
}
const ipAddrs = (ns: Parameters<typeof ipJson>[0], dev: string): IpAddr['addr_info'] =>
  ipJson<IpAddr[]>(ns, `addr show dev ${dev}`)[0]!.addr_info;

let eth0: link.Link;
beforeEach(async () => {
  ({ peer: eth0 } = await link.addVeth(t.host.ns, { name: 'veth0', peerName: 'eth0', peerNs: t.ctr.ns }));
  await link.setUp(t.ctr.ns, 'eth0');
  await link.setUp(t.host.ns, 'veth0'); // carrier, so IPv6 configures link-local addresses
});

test('IPv4: add with broadcast, list, delete', async () => {
  await addr.add(t.ctr.ns, eth0.index, '10.1.0.5/24');
  expect(ipAddrs(t.ctr.ns, 'eth0')).toContainEqual(
    expect.objectContaining({ family: 'inet', local: '10.1.0.5', prefixlen: 24, broadcast: '10.1.0.255', scope: 'global' }),
  );
  const listed = await addr.list(t.ctr.ns, { index: eth0.index, family: 4 });
  expect(listed).toEqual([{ index: eth0.index, address: '10.1.0.5/24', family: 4, scope: 0, flags: addr.IFA_F.PERMANENT }]);
  await addr.add(t.ctr.ns, eth0.index, '10.2.0.1/32');
  expect((await addr.list(t.ctr.ns, { family: 4 })).map((a) => a.address).sort()).toEqual(['10.1.0.5/24', '10.2.0.1/32', '127.0.0.1/8']);
  await addr.del(t.ctr.ns, eth0.index, '10.1.0.5/24');
  expect(ipAddrs(t.ctr.ns, 'eth0').map((a) => a.local)).not.toContain('10.1.0.5');
  expect((await addr.list(t.ctr.ns, { index: eth0.index, family: 4 })).map((a) => a.address)).toEqual(['10.2.0.1/32']);
});

test('IPv6: add with and without DAD, list, delete', async () => {
  await addr.add(t.ctr.ns, eth0.index, 'fd00:10::5/64', { noDad: true });
  const info = ipAddrs(t.ctr.ns, 'eth0').find((a) => a.local === 'fd00:10::5')!;
  expect(info).toMatchObject({ family: 'inet6', prefixlen: 64, scope: 'global', nodad: true });
  expect(info.tentative).toBeUndefined();
  // The kernel's link-local address is there too, in link scope (added once carrier is seen).
  const hasLinkLocal = async (): Promise<boolean> =>
    (await addr.list(t.ctr.ns, { index: eth0.index, family: 6 })).some((a) => a.address.startsWith('fe80::') && a.scope === 253);
  // kernel work deferred to a workqueue
  expect(await eventually('an IPv6 link-local address', hasLinkLocal, 5000)).toBe(true);
  const listed = await addr.list(t.ctr.ns, { index: eth0.index, family: 6 });
  const ours = listed.find((a) => a.address === 'fd00:10::5/64')!;
  expect(ours).toMatchObject({ index: eth0.index, family: 6, scope: 0 });
  expect(ours.flags & addr.IFA_F.NODAD).toBeTruthy();
  await addr.add(t.ctr.ns, eth0.index, '2001:db8:0:0:1::7/80');
  expect((await addr.list(t.ctr.ns, { family: 6 })).map((a) => a.address)).toContain('2001:db8::1:0:0:7/80');
  await addr.del(t.ctr.ns, eth0.index, 'fd00:10::5/64');
  expect(ipAddrs(t.ctr.ns, 'eth0').map((a) => a.local)).not.toContain('fd00:10::5');
});

test('list filters by family and link', async () => {
  await addr.add(t.ctr.ns, eth0.index, '10.1.0.5/24');
  await addr.add(t.ctr.ns, eth0.index, 'fd00::5/64', { noDad: true });
  const all = await addr.list(t.ctr.ns);
  expect(all.map((a) => a.family).sort()).toEqual(expect.arrayContaining([4, 6]));
  expect((await addr.list(t.ctr.ns, { index: 1 })).map((a) => a.address).sort()).toEqual(['127.0.0.1/8', '::1/128']);
  expect((await addr.list(t.ctr.ns, { family: 4 })).every((a) => a.family === 4)).toBe(true);
});

test('errors: EEXIST on a duplicate, EADDRNOTAVAIL on deleting an absent address, ENODEV on a missing link', async () => {
  await addr.add(t.ctr.ns, eth0.index, '10.1.0.5/24');
  const dup = await rejection(addr.add(t.ctr.ns, eth0.index, '10.1.0.5/24'));
  expect(dup).toBeInstanceOf(NetlinkError);
  expect(isExistsError(dup)).toBe(true);
  expect(dup.message).toBe(`netlink: add address 10.1.0.5/24 dev index ${eth0.index}: EEXIST`);
  await addr.add(t.ctr.ns, eth0.index, 'fd00::5/64', { noDad: true });
  expect((await rejection(addr.add(t.ctr.ns, eth0.index, 'fd00::5/64'))).errno).toBe('EEXIST');
  for (const cidr of ['10.9.9.9/24', 'fd00::9/64']) {
    const gone = await rejection(addr.del(t.ctr.ns, eth0.index, cidr));
    expect(gone.errno).toBe('EADDRNOTAVAIL');
    expect(isNotFoundError(gone)).toBe(true);
  }
  expect((await rejection(addr.add(t.ctr.ns, 999, '10.3.0.1/24'))).errno).toBe('ENODEV');
  expect(await rejection(addr.add(t.ctr.ns, eth0.index, '10.3.0.1/33'))).toBeInstanceOf(TypeError);
  expect(await rejection(addr.add(t.ctr.ns, eth0.index, 'not-an-ip/24'))).toBeInstanceOf(TypeError);
});
