import { isExistsError, isNotFoundError, NetlinkError } from '../../src/errors';
import * as addr from '../../src/addr';
import * as link from '../../src/link';
import * as tc from '../../src/tc';
import * as neigh from '../../src/neigh';
import { ipJson, sendUdp, sh, tcJson } from '@cnikit/netlib-testing';
import { rejection, useNamespaces } from './fixture';

const t = useNamespaces();

interface TcQdisc {
  kind: string;
  handle: string;
  root?: boolean;
  parent?: string;
  options?: Record<string, unknown>;
}

let veth0: link.Link;
let eth0: link.Link;
beforeEach(async () => {
  ({ link: veth0, peer: eth0 } = await link.addVeth(t.host.ns, { name: 'veth0', peerName: 'eth0', peerNs: t.ctr.ns }));
});

describe('tbf', () => {
  test('root tbf with the rate, burst and latency asked for', async () => {
    await tc.addTbf(t.host.ns, veth0.index, { rateBps: tc.bitsToBytes(1_000_000), burstBytes: 10240, latencyUs: 25_000 });
    const [q] = tcJson<TcQdisc[]>(t.host.ns, 'qdisc show dev veth0');
    expect(q).toMatchObject({ kind: 'tbf', root: true, options: { rate: 125000, burst: 10240, lat: 25000 } });
    const listed = await tc.listQdiscs(t.host.ns, veth0.index);
    expect(listed).toEqual([{ index: veth0.index, kind: 'tbf', handle: expect.any(Number), parent: tc.TC_H.ROOT }]);
    expect(listed[0]!.handle >>> 16).toBe(parseInt(q!.handle, 16));
  });

  test('an explicit queue limit, and a rate above 4 GB/s (TCA_TBF_RATE64)', async () => {
    await tc.addTbf(t.host.ns, veth0.index, { rateBps: 5_000_000_000, burstBytes: 1_000_000, limitBytes: 2_000_000 });
    const [q] = tcJson<Array<TcQdisc & { options: { rate: number; burst: number; lat: number } }>>(t.host.ns, 'qdisc show dev veth0');
    expect(q).toMatchObject({ kind: 'tbf', options: { rate: 5_000_000_000 } });
    expect(sh(t.host.ns, 'tc qdisc show dev veth0')).toMatch(/rate 40Gbit/);
    // tc prints the limit as the latency it allows: (limit - burst) / rate = 200 us, and
    // the burst back from ticks (64 ns at 5 GB/s: a little rounding).
    expect(Math.abs(q!.options.lat - 200)).toBeLessThanOrEqual(2);
    expect(Math.abs(q!.options.burst - 1_000_000) / 1_000_000).toBeLessThan(0.01);
  });

  test('shapes real traffic: a 100 kbit/s tbf drops what does not fit its queue', async () => {
    await link.setUp(t.host.ns, 'veth0');
    await link.setUp(t.ctr.ns, 'eth0');
    await addr.add(t.host.ns, veth0.index, '10.8.0.1/24');
    await addr.add(t.ctr.ns, eth0.index, '10.8.0.2/24');
    // A static neighbour, so no datagram waits for ARP (and is dropped there instead of in tbf).
    await neigh.add(t.host.ns, { index: veth0.index, ip: '10.8.0.2', mac: eth0.mac });
    await tc.addTbf(t.host.ns, veth0.index, { rateBps: 12_500, burstBytes: 2000, limitBytes: 3000 });
    // 20 back-to-back 1400-byte datagrams need ~2.3 s at 12.5 kB/s; a 3 kB queue holds two.
    await sendUdp(t.host.ns, { dst: '10.8.0.2', count: 20, size: 1400 });
    const stats = tcJson<Array<{ kind: string; drops: number; packets: number }>>(t.host.ns, '-s qdisc show dev veth0')[0]!;
    expect(stats.kind).toBe('tbf');
    expect(stats.drops).toBeGreaterThan(10);
  });

  test('EEXIST on a second root qdisc; delete; ENOENT when only the default is left', async () => {
    await tc.addTbf(t.host.ns, veth0.index, { rateBps: 125000, burstBytes: 10000 });
    const dup = await rejection(tc.addTbf(t.host.ns, veth0.index, { rateBps: 125000, burstBytes: 10000 }));
    expect(dup).toBeInstanceOf(NetlinkError);
    expect(isExistsError(dup)).toBe(true);
    expect(dup.message).toBe(`netlink: add qdisc tbf dev index ${veth0.index} root rate 125000Bps burst 10000: EEXIST`);
    await tc.delRootQdisc(t.host.ns, veth0.index);
    expect(tcJson<TcQdisc[]>(t.host.ns, 'qdisc show dev veth0').map((q) => q.kind)).not.toContain('tbf');
    const gone = await rejection(tc.delRootQdisc(t.host.ns, veth0.index));
    expect(gone.errno).toBe('ENOENT');
    expect(isNotFoundError(gone)).toBe(true);
    expect((await rejection(tc.addTbf(t.host.ns, 999, { rateBps: 1, burstBytes: 1 }))).errno).toBe('ENODEV');
  });
});

describe('htb', () => {
  test('root htb with a handle and default class', async () => {
    await tc.addHtb(t.host.ns, veth0.index, { handle: tc.handle(1), defaultClass: 0x30 });
    expect(tcJson<TcQdisc[]>(t.host.ns, 'qdisc show dev veth0')).toEqual([
      expect.objectContaining({ kind: 'htb', handle: '1:', root: true, options: expect.objectContaining({ r2q: 10, default: '0x30' }) }),
    ]);
    expect(await tc.listQdiscs(t.host.ns, veth0.index)).toEqual([
      { index: veth0.index, kind: 'htb', handle: 0x10000, parent: tc.TC_H.ROOT },
    ]);
    expect((await rejection(tc.addHtb(t.host.ns, veth0.index))).errno).toBe('EEXIST');
    await tc.delRootQdisc(t.host.ns, veth0.index);
    expect(await tc.listQdiscs(t.host.ns, veth0.index)).not.toContainEqual(expect.objectContaining({ kind: 'htb' }));
  });
});

describe('ingress redirect to ifb', () => {
  test('ingress qdisc + u32 match-all filter with mirred egress redirect', async () => {
    const ifb = await link.add(t.host.ns, { name: 'ifb0', kind: 'ifb' });
    await tc.addIngress(t.host.ns, veth0.index);
    expect(tcJson<TcQdisc[]>(t.host.ns, 'qdisc show dev veth0 ingress')).toEqual([
      expect.objectContaining({ kind: 'ingress', handle: 'ffff:', parent: 'ffff:fff1' }),
    ]);
    expect(await tc.listQdiscs(t.host.ns, veth0.index)).toContainEqual({
      index: veth0.index,
      kind: 'ingress',
      handle: tc.INGRESS_HANDLE,
      parent: tc.TC_H.INGRESS,
    });

    await tc.addRedirectFilter(t.host.ns, veth0.index, { parent: tc.INGRESS_HANDLE, targetIndex: ifb.index });
    const filters = tcJson<
      Array<{ kind: string; pref: number; protocol: string; options?: { match?: unknown; actions?: Array<Record<string, unknown>> } }>
    >(t.host.ns, 'filter show dev veth0 parent ffff:');
    const withActions = filters.find((f) => f.options?.actions)!;
    expect(withActions).toMatchObject({ kind: 'u32', pref: 1, protocol: 'all', options: { match: { value: '0', mask: '0' } } });
    expect(withActions.options!.actions).toEqual([
      expect.objectContaining({
        kind: 'mirred',
        mirred_action: 'redirect',
        direction: 'egress',
        to_dev: 'ifb0',
        control_action: { type: 'stolen' },
      }),
    ]);

    // Traffic entering veth0 now leaves through ifb0.
    await link.setUp(t.host.ns, 'ifb0');
    await link.setUp(t.host.ns, 'veth0');
    await link.setUp(t.ctr.ns, 'eth0');
    await addr.add(t.host.ns, veth0.index, '10.8.0.1/24');
    await addr.add(t.ctr.ns, eth0.index, '10.8.0.2/24');
    await neigh.add(t.ctr.ns, { index: eth0.index, ip: '10.8.0.1', mac: veth0.mac });
    expect(await sendUdp(t.ctr.ns, { dst: '10.8.0.1', count: 5, size: 100 })).toBe(5);
    const ifbStats = ipJson<Array<{ stats64: { tx: { packets: number } } }>>(t.host.ns, '-s link show ifb0')[0]!;
    expect(ifbStats.stats64.tx.packets).toBeGreaterThanOrEqual(5);

    expect((await rejection(tc.addIngress(t.host.ns, veth0.index))).errno).toBe('EEXIST');
    await tc.delIngress(t.host.ns, veth0.index);
    expect(tcJson<TcQdisc[]>(t.host.ns, 'qdisc show dev veth0 ingress')).toEqual([]);
    expect(tcJson(t.host.ns, 'filter show dev veth0 parent ffff:')).toEqual([]);
    expect(isNotFoundError(await rejection(tc.delIngress(t.host.ns, veth0.index)))).toBe(true);
  });

  test('ifb shaping: tbf on the ifb device', async () => {
    const ifb = await link.add(t.host.ns, { name: 'ifb1', kind: 'ifb' });
    await tc.addTbf(t.host.ns, ifb.index, { rateBps: 250_000, burstBytes: 20_000 });
    expect(tcJson<TcQdisc[]>(t.host.ns, 'qdisc show dev ifb1')[0]).toMatchObject({ kind: 'tbf', options: { rate: 250000, burst: 20000 } });
  });

  test('a filter on a missing parent qdisc fails with a NetlinkError', async () => {
    const err = await rejection(tc.addRedirectFilter(t.host.ns, veth0.index, { parent: tc.INGRESS_HANDLE, targetIndex: veth0.index }));
    expect(err).toBeInstanceOf(NetlinkError);
    expect(err.message).toMatch(/^netlink: add filter u32 dev index \d+ parent ffff: redirect to index \d+: E[A-Z]+$/);
  });
});

test('listQdiscs without an index covers every link', async () => {
  await tc.addIngress(t.host.ns, veth0.index);
  const all = await tc.listQdiscs(t.host.ns);
  expect(all.some((q) => q.index === 1)).toBe(true); // lo's default qdisc
  expect(all).toContainEqual(expect.objectContaining({ index: veth0.index, kind: 'ingress' }));
});
