import { isExistsError, isNotFoundError, NetlinkError } from '../../src/errors';
import * as link from '../../src/link';
import * as neigh from '../../src/neigh';
import { ipJson } from '@cnikit/netlib-testing';
import { rejection, useNamespaces } from './fixture';

const t = useNamespaces();

interface IpNeigh {
  dst: string;
  dev: string;
  lladdr?: string;
  state: string[];
}
const ipNeigh = (): IpNeigh[] => ipJson<IpNeigh[]>(t.ctr.ns, 'neigh show');

let eth0: link.Link;
beforeEach(async () => {
  ({ peer: eth0 } = await link.addVeth(t.host.ns, { name: 'veth0', peerName: 'eth0', peerNs: t.ctr.ns }));
  await link.setUp(t.ctr.ns, 'eth0');
});

test.each([
  ['IPv4', '10.1.0.1', 4],
  ['IPv6', 'fd00:1::1', 6],
] as const)('%s: permanent entry add, replace, delete', async (_name, ip, family) => {
  await neigh.add(t.ctr.ns, { index: eth0.index, ip, mac: '02:00:00:00:00:aa' });
  expect(ipNeigh()).toContainEqual({ dst: ip, dev: 'eth0', lladdr: '02:00:00:00:00:aa', state: ['PERMANENT'] });
  expect(await neigh.list(t.ctr.ns, { index: eth0.index, family })).toEqual([
    { index: eth0.index, ip, mac: '02:00:00:00:00:aa', state: neigh.NUD.PERMANENT, family },
  ]);
  await neigh.replace(t.ctr.ns, { index: eth0.index, ip, mac: '02:00:00:00:00:bb' });
  expect(ipNeigh()).toContainEqual({ dst: ip, dev: 'eth0', lladdr: '02:00:00:00:00:bb', state: ['PERMANENT'] });
  await neigh.del(t.ctr.ns, { index: eth0.index, ip });
  expect(ipNeigh().map((n) => n.dst)).not.toContain(ip);
  expect(await neigh.list(t.ctr.ns, { index: eth0.index, family })).toEqual([]);
});

test('replace creates; list spans both families; a non-permanent state', async () => {
  await neigh.replace(t.ctr.ns, { index: eth0.index, ip: '10.1.0.2', mac: '02:00:00:00:00:02', state: neigh.NUD.STALE });
  await neigh.add(t.ctr.ns, { index: eth0.index, ip: 'fd00::2', mac: '02:00:00:00:00:03' });
  expect(ipNeigh()).toContainEqual({ dst: '10.1.0.2', dev: 'eth0', lladdr: '02:00:00:00:00:02', state: ['STALE'] });
  const all = await neigh.list(t.ctr.ns);
  expect(all).toContainEqual(expect.objectContaining({ ip: '10.1.0.2', state: neigh.NUD.STALE, family: 4 }));
  expect(all).toContainEqual(expect.objectContaining({ ip: 'fd00::2', state: neigh.NUD.PERMANENT, family: 6 }));
});

test('errors: EEXIST on a duplicate add, ENOENT on deleting an absent entry', async () => {
  for (const ip of ['10.1.0.1', 'fd00:1::1']) {
    await neigh.add(t.ctr.ns, { index: eth0.index, ip, mac: '02:00:00:00:00:aa' });
    const dup = await rejection(neigh.add(t.ctr.ns, { index: eth0.index, ip, mac: '02:00:00:00:00:aa' }));
    expect(dup).toBeInstanceOf(NetlinkError);
    expect(isExistsError(dup)).toBe(true);
    expect(dup.message).toBe(`netlink: add neighbour ${ip} lladdr 02:00:00:00:00:aa dev index ${eth0.index}: EEXIST`);
  }
  for (const ip of ['10.1.0.9', 'fd00:1::9']) {
    const gone = await rejection(neigh.del(t.ctr.ns, { index: eth0.index, ip }));
    expect(gone.errno).toBe('ENOENT');
    expect(isNotFoundError(gone)).toBe(true);
  }
});
