// Egress datapath plans, without a kernel: device names, the client's rules / routes / tunnels,
// the router's tunnels / routes / rules, and the diff both use to converge.
import { createHash } from 'node:crypto';
import { clientRules, diffByKey, normalizeDestination, planClient, tableFor, type NatClientConfig } from '../src/egress/client-plan';
import { fouLinkName, isFouLinkName } from '../src/egress/names';
import type { tunnel } from '@cnikit/netlib';
import { planRouter } from '../src/egress/router-plan';
import { tunnelMatches } from '../src/egress/tunnels';

describe('device names', () => {
  test.each([
    ['10.96.0.10', 'fou4_0a60000a'],
    ['192.168.255.1', 'fou4_c0a8ff01'],
    ['0.0.0.0', 'fou4_00000000'],
  ])('%s -> %s', (addr, name) => {
    expect(fouLinkName(addr)).toBe(name);
    expect(isFouLinkName(name)).toBe(true);
  });

  test('IPv6: first 4 bytes of the SHA-1 of the 16-byte address, whatever the spelling', () => {
    const bytes = Buffer.from('fd000096000000000000000000000010', 'hex');
    const want = `fou6_${createHash('sha1').update(bytes).digest('hex').slice(0, 8)}`;
    expect(fouLinkName('fd00:96::10')).toBe(want);
    expect(fouLinkName('FD00:96:0:0::10')).toBe(want);
    expect(fouLinkName('fd00:96::11')).not.toBe(want);
    expect(want.length).toBeLessThanOrEqual(15); // IFNAMSIZ - 1
  });

  test('malformed addresses are refused; other names are not ours', () => {
    expect(() => fouLinkName('10.96.0')).toThrow();
    expect(() => fouLinkName('10.96.0.0/24')).toThrow();
    for (const n of ['coil_ipip4', 'fou4_0a60000', 'fou4_0A60000A', 'eth0', 'fou5_0a60000a']) expect(isFouLinkName(n)).toBe(false);
  });
});

describe('client rules and tables', () => {
  test('IPv4 rules: link-local 1800, 117 at 1900, private 2000-2002 to main, 118 at 2100', () => {
    expect(clientRules(4)).toEqual([
      { family: 4, priority: 1800, table: 254, dst: '169.254.0.0/16' },
      { family: 4, priority: 1900, table: 117 },
      { family: 4, priority: 2000, table: 254, dst: '10.0.0.0/8' },
      { family: 4, priority: 2001, table: 254, dst: '172.16.0.0/12' },
      { family: 4, priority: 2002, table: 254, dst: '192.168.0.0/16' },
      { family: 4, priority: 2100, table: 118 },
    ]);
  });

  test('IPv6 rules: fe80::/10 and fc00::/7', () => {
    expect(clientRules(6).map((r) => `${r.priority} ${r.dst ?? 'all'} ${r.table}`)).toEqual([
      '1800 fe80::/10 254',
      '1900 all 117',
      '2000 fc00::/7 254',
      '2100 all 118',
    ]);
  });

  test.each([
    ['10.1.0.0/16', 117],
    ['172.20.0.0/16', 117],
    ['192.168.1.0/24', 117],
    ['172.32.0.0/16', 118],
    ['0.0.0.0/0', 118],
    ['8.8.8.8/32', 118],
    ['10.0.0.0/7', 118], // wider than private space
    ['fd20::/64', 117],
    ['2001:db8::/32', 118],
    ['::/0', 118],
  ])('%s -> table %d', (cidr, table) => expect(tableFor(cidr)).toBe(table));

  test('destinations: host bits cleared, bare addresses become host prefixes', () => {
    expect(normalizeDestination('203.0.113.7/24')).toBe('203.0.113.0/24');
    expect(normalizeDestination('2001:DB8::1/48')).toBe('2001:db8::/48');
    expect(normalizeDestination('8.8.8.8')).toBe('8.8.8.8/32');
    expect(normalizeDestination('2001:db8::1')).toBe('2001:db8::1/128');
  });
});

const egress = (o: Partial<NatClientConfig['egresses'][number]> = {}): NatClientConfig['egresses'][number] => ({
  namespace: 'internet',
  name: 'egress',
  peerIPv4: '10.96.0.10',
  peerIPv6: 'fd00:96::10',
  destinations: ['0.0.0.0/0', '::/0'],
  fouSourcePortAuto: false,
  ...o,
});

describe('planClient', () => {
  test('dual-stack pod, one Egress: both families, one tunnel each, routes split by family and table', () => {
    const p = planClient({
      fouPort: 5555,
      podIPv4: '10.64.0.65',
      podIPv6: 'fd00:64::65',
      egresses: [egress({ destinations: ['0.0.0.0/0', '10.8.0.0/16', '::/0', 'fd20::/64'] })],
    });
    expect(p.families).toEqual([4, 6]);
    expect(p.rules).toHaveLength(10);
    const t6 = fouLinkName('fd00:96::10');
    expect(p.tunnels).toEqual([
      { name: 'fou4_0a60000a', family: 4, local: '10.64.0.65', remote: '10.96.0.10', dport: 5555, sport: 5555 },
      { name: t6, family: 6, local: 'fd00:64::65', remote: 'fd00:96::10', dport: 5555, sport: 5555 },
    ]);
    expect(p.routes).toEqual([
      { dst: '0.0.0.0/0', table: 118, dev: 'fou4_0a60000a' },
      { dst: '10.8.0.0/16', table: 117, dev: 'fou4_0a60000a' },
      { dst: '::/0', table: 118, dev: t6 },
      { dst: 'fd20::/64', table: 117, dev: t6 },
    ]);
  });

  test('fouSourcePortAuto: sport 0; another fouPort moves dport and fixed sport', () => {
    expect(planClient({ fouPort: 5555, podIPv4: '10.64.0.65', egresses: [egress({ fouSourcePortAuto: true })] }).tunnels[0]).toMatchObject({
      sport: 0,
      dport: 5555,
    });
    expect(planClient({ fouPort: 6000, podIPv4: '10.64.0.65', egresses: [egress()] }).tunnels[0]).toMatchObject({
      sport: 6000,
      dport: 6000,
    });
  });

  test('IPv4-only pod: no IPv6 rules, tunnel or routes even if the Egress has an IPv6 peer', () => {
    const p = planClient({ fouPort: 5555, podIPv4: '10.64.0.65', egresses: [egress()] });
    expect(p.families).toEqual([4]);
    expect(p.tunnels.map((t) => t.family)).toEqual([4]);
    expect(p.routes).toEqual([{ dst: '0.0.0.0/0', table: 118, dev: 'fou4_0a60000a' }]);
    expect(p.rules.every((r) => r.family === 4)).toBe(true);
  });

  test('an Egress without a peer of a family contributes no routes of it', () => {
    const p = planClient({ fouPort: 5555, podIPv4: '10.64.0.65', podIPv6: 'fd00:64::65', egresses: [egress({ peerIPv6: undefined })] });
    expect(p.tunnels.map((t) => t.name)).toEqual(['fou4_0a60000a']);
    expect(p.routes.map((r) => r.dst)).toEqual(['0.0.0.0/0']);
  });

  test('two Egresses: two tunnels; a destination both name goes to the first', () => {
    const p = planClient({
      fouPort: 5555,
      podIPv4: '10.64.0.65',
      egresses: [
        egress({ destinations: ['203.0.113.0/24'] }),
        egress({ name: 'other', peerIPv4: '10.96.0.11', destinations: ['203.0.113.0/24', '198.51.100.0/24'] }),
      ],
    });
    expect(p.tunnels.map((t) => t.name)).toEqual(['fou4_0a60000a', 'fou4_0a60000b']);
    expect(p.routes).toEqual([
      { dst: '203.0.113.0/24', table: 118, dev: 'fou4_0a60000a' },
      { dst: '198.51.100.0/24', table: 118, dev: 'fou4_0a60000b' },
    ]);
  });

  test('no Egress = nothing at all (the caller removes everything)', () => {
    expect(planClient({ fouPort: 5555, podIPv4: '10.64.0.65', egresses: [] })).toEqual({
      families: [],
      fouPort: 5555,
      rules: [],
      tunnels: [],
      routes: [],
    });
  });

  test('a peer of the wrong family names the Egress and the field', () => {
    expect(() => planClient({ fouPort: 5555, podIPv4: '10.64.0.65', egresses: [egress({ peerIPv4: 'fd00::1' })] })).toThrow(
      /egress internet\/egress: peerIPv4 "fd00::1"/,
    );
  });
});

describe('planRouter', () => {
  test('one tunnel and host route per client, rule iif uplink -> 118, sport per mode', () => {
    const p = planRouter({
      fouPort: 5555,
      podIPv4: '10.72.49.1',
      podIPv6: 'fd00:72::1',
      sportAuto: true,
      clients: ['10.64.0.65', 'fd00:64::65', '10.64.0.66', '10.64.0.65'],
    });
    expect(p.tunnels.map((t) => [t.name, t.local, t.remote, t.sport])).toEqual([
      ['fou4_0a400041', '10.72.49.1', '10.64.0.65', 0],
      [fouLinkName('fd00:64::65'), 'fd00:72::1', 'fd00:64::65', 0],
      ['fou4_0a400042', '10.72.49.1', '10.64.0.66', 0],
    ]);
    expect(p.routes.map((r) => `${r.dst} ${r.table} ${r.dev}`)).toEqual([
      '10.64.0.65/32 118 fou4_0a400041',
      `fd00:64::65/128 118 ${fouLinkName('fd00:64::65')}`,
      '10.64.0.66/32 118 fou4_0a400042',
    ]);
    expect(p.rules).toEqual([
      { family: 4, priority: 2000, table: 118, iif: 'eth0' },
      { family: 6, priority: 2000, table: 118, iif: 'eth0' },
    ]);
  });

  test('fixed sport = FoU port; clients of a family the router lacks are skipped', () => {
    const p = planRouter({
      fouPort: 5555,
      podIPv4: '10.72.49.1',
      sportAuto: false,
      clients: ['fd00:64::65', '10.64.0.65'],
      uplink: 'net1',
    });
    expect(p.tunnels.map((t) => [t.remote, t.sport])).toEqual([['10.64.0.65', 5555]]);
    expect(p.rules).toEqual([{ family: 4, priority: 2000, table: 118, iif: 'net1' }]);
  });
});

describe('diffByKey', () => {
  test('adds the missing and the different, removes the unwanted, keeps the same', () => {
    const key = (x: { k: string }): string => x.k;
    const d = diffByKey(
      [
        { k: 'a', v: 1 },
        { k: 'b', v: 2 },
        { k: 'c', v: 3 },
      ],
      [
        { k: 'b', v: 2 },
        { k: 'c', v: 9 },
        { k: 'd', v: 4 },
      ],
      key,
      key,
      (w, h) => w.v === h.v,
    );
    expect(d.add.map(key)).toEqual(['a', 'c']);
    expect(d.remove.map(key)).toEqual(['d']);
  });
});

describe('tunnelMatches (what makes reconcile change a device)', () => {
  const want = { name: 'fou4_0a60000a', family: 4 as const, local: '10.64.0.65', remote: '10.96.0.10', dport: 5555, sport: 0 };
  const have = (o: { kind?: string; tunnel?: Record<string, unknown> } = {}): tunnel.LinkDetails =>
    ({
      index: 7,
      name: want.name,
      kind: o.kind ?? 'ipip',
      mtu: 1472,
      mac: '',
      up: true,
      tunnel: {
        ttl: 225,
        external: false,
        remote: '10.96.0.10',
        local: '10.64.0.65',
        encap: { type: 'fou', dport: 5555, sport: 0, csum: false, csum6: false, remcsum: false },
        ...o.tunnel,
      },
    }) as tunnel.LinkDetails;

  test('the same tunnel matches; absent does not', () => {
    expect(tunnelMatches(want, have())).toBe(true);
    expect(tunnelMatches(want, undefined)).toBe(false);
  });

  test.each([
    ['encap sport', { tunnel: { encap: { type: 'fou', dport: 5555, sport: 5555 } } }],
    ['encap dport', { tunnel: { encap: { type: 'fou', dport: 6000, sport: 0 } } }],
    ['no encap', { tunnel: { encap: undefined } }],
    ['GUE', { tunnel: { encap: { type: 'gue', dport: 5555, sport: 0 } } }],
    ['remote', { tunnel: { remote: '10.96.0.11' } }],
    ['local', { tunnel: { local: '10.64.0.66' } }],
    ['flow-based', { tunnel: { external: true } }],
    ['kind', { kind: 'ip6tnl' }],
  ])('a different %s does not match', (_what, o) => {
    expect(tunnelMatches(want, have(o as never))).toBe(false);
  });

  test('IPv6: ip6tnl in ip6ip6 mode only', () => {
    const w6 = { ...want, name: 'fou6_01234567', family: 6 as const, local: 'fd00:64::65', remote: 'fd00:96::10' };
    const h6 = (proto: string): tunnel.LinkDetails =>
      have({ kind: 'ip6tnl', tunnel: { proto, local: 'fd00:64::65', remote: 'fd00:96::10' } });
    expect(tunnelMatches(w6, h6('ip6ip6'))).toBe(true);
    expect(tunnelMatches(w6, h6('any'))).toBe(false);
  });
});
