/**
 * tunnel/ and fou/ attribute encoding, without a kernel (the host kernel here has none of
 * these drivers; the kernel lab, e2e/kernel-lab/test/tunnels.test.ts, runs them for real).
 */
import { parseAttrs, readU16, readU32 } from '../../src/nl/attrs';
import {
  IFLA_IPTUN,
  IFLA_IPVLAN_FLAGS,
  IFLA_IPVLAN_MODE,
  ip6tnlData,
  ipipData,
  ipvlanData,
  parseIpvlanData,
  parseTunnelData,
} from '../../src/tunnel/wire';
import { FOU_ATTR, addAttrs, keyAttrs, parsePort } from '../../src/fou';

const attrs = (bufs: Buffer[]): Map<number, Buffer> => parseAttrs(Buffer.concat(bufs));

describe('ipvlan', () => {
  test.each([
    ['l2', 'bridge', 0, 0],
    ['l3', 'private', 1, 1],
    ['l3s', 'vepa', 2, 2],
  ] as const)('mode %s flag %s -> %d/%d and back', (mode, flag, m, f) => {
    const a = attrs(ipvlanData(mode, flag));
    expect(readU16(a.get(IFLA_IPVLAN_MODE)!)).toBe(m);
    expect(readU16(a.get(IFLA_IPVLAN_FLAGS)!)).toBe(f);
    expect(parseIpvlanData(Buffer.concat(ipvlanData(mode, flag)))).toEqual({ mode, flag });
  });

  test('unknown mode or flag is a TypeError naming the value', () => {
    expect(() => ipvlanData('l4' as never)).toThrow(/invalid ipvlan mode "l4"/);
    expect(() => ipvlanData('l2', 'open' as never)).toThrow(/invalid ipvlan flag "open"/);
  });
});

describe('ipip', () => {
  test('FoU with auto source port: encap type 1, sport 0, dport big-endian, pmtudisc on', () => {
    const data = ipipData({ name: 't', local: '192.168.100.1', remote: '192.168.100.2', encap: { type: 'fou', dport: 5555 } });
    const a = attrs(data);
    expect([...a.get(IFLA_IPTUN.LOCAL)!]).toEqual([192, 168, 100, 1]);
    expect([...a.get(IFLA_IPTUN.REMOTE)!]).toEqual([192, 168, 100, 2]);
    expect(readU16(a.get(IFLA_IPTUN.ENCAP_TYPE)!)).toBe(1);
    expect(readU16(a.get(IFLA_IPTUN.ENCAP_FLAGS)!)).toBe(0);
    expect([...a.get(IFLA_IPTUN.ENCAP_SPORT)!]).toEqual([0, 0]);
    expect([...a.get(IFLA_IPTUN.ENCAP_DPORT)!]).toEqual([0x15, 0xb3]); // 5555
    expect(a.get(IFLA_IPTUN.PMTUDISC)![0]).toBe(1);
    expect(a.get(IFLA_IPTUN.TTL)![0]).toBe(0);
    expect(a.has(IFLA_IPTUN.COLLECT_METADATA)).toBe(false);
    expect(parseTunnelData(Buffer.concat(data))).toEqual({
      local: '192.168.100.1',
      remote: '192.168.100.2',
      ttl: 0,
      pmtudisc: true,
      external: false,
      encap: { type: 'fou', sport: 0, dport: 5555, csum: false, csum6: false, remcsum: false },
    });
  });

  test('fixed source port, checksum flags, external, fwmark, underlying link', () => {
    const data = ipipData({
      name: 't',
      external: true,
      linkIndex: 7,
      fwmark: 0x10,
      ttl: 64,
      encap: { type: 'gue', dport: 6080, sport: 5555, csum: true, remcsum: true },
    });
    const a = attrs(data);
    expect(a.has(IFLA_IPTUN.COLLECT_METADATA)).toBe(true);
    expect(readU32(a.get(IFLA_IPTUN.LINK)!)).toBe(7);
    expect(readU16(a.get(IFLA_IPTUN.ENCAP_FLAGS)!)).toBe(1 | 4);
    expect(parseTunnelData(Buffer.concat(data))).toMatchObject({
      external: true,
      linkIndex: 7,
      fwmark: 0x10,
      ttl: 64,
      encap: { type: 'gue', sport: 5555, dport: 6080, csum: true, csum6: false, remcsum: true },
    });
  });

  test('bad arguments are TypeErrors naming the field and value', () => {
    expect(() => ipipData({ name: 't', remote: 'fd00::1' })).toThrow(/invalid remote "fd00::1": expected an IPv4 address/);
    expect(() => ipipData({ name: 't', encap: { type: 'fou', dport: 70000 } })).toThrow(/invalid encap dport 70000/);
    expect(() => ipipData({ name: 't', encap: { type: 'vxlan' as never, dport: 1 } })).toThrow(/invalid encap type "vxlan"/);
    expect(() => ipipData({ name: 't', ttl: 300 })).toThrow(/invalid ttl 300/);
  });
});

describe('ip6tnl', () => {
  test('defaults: proto any, encap limit 4, flags 0', () => {
    const a = attrs(ip6tnlData({ name: 't', remote: 'fd00::2' }));
    expect(a.get(IFLA_IPTUN.PROTO)![0]).toBe(0);
    expect(a.get(IFLA_IPTUN.ENCAP_LIMIT)![0]).toBe(4);
    expect(readU32(a.get(IFLA_IPTUN.FLAGS)!)).toBe(0);
    expect(a.get(IFLA_IPTUN.REMOTE)!.length).toBe(16);
  });

  test('ip6ip6 over FoU, no encap limit, flow label; decodes back', () => {
    const data = ip6tnlData({
      name: 't',
      local: 'fd00:100::1',
      remote: 'fd00:100::2',
      proto: 'ip6ip6',
      encapLimit: 'none',
      flowLabel: 0xabcde,
      encap: { type: 'fou', dport: 5556, csum6: true },
    });
    const a = attrs(data);
    expect(a.get(IFLA_IPTUN.PROTO)![0]).toBe(41);
    expect(readU32(a.get(IFLA_IPTUN.FLAGS)!)).toBe(1); // IP6_TNL_F_IGN_ENCAP_LIMIT
    expect(a.get(IFLA_IPTUN.FLOWINFO)!.readUInt32BE(0)).toBe(0xabcde);
    expect(parseTunnelData(Buffer.concat(data))).toMatchObject({
      local: 'fd00:100::1',
      remote: 'fd00:100::2',
      proto: 'ip6ip6',
      encap: { type: 'fou', dport: 5556, sport: 0, csum6: true },
    });
    expect(() => ip6tnlData({ name: 't', local: '10.0.0.1' })).toThrow(/expected an IPv6 address/);
    expect(() => ip6tnlData({ name: 't', proto: 'gre' as never })).toThrow(/invalid ip6tnl proto "gre"/);
  });
});

describe('fou', () => {
  test('ADD: port big-endian, AF_INET, type direct, ipproto', () => {
    const a = attrs(addAttrs({ port: 5555, ipproto: 4 }));
    expect([...a.get(FOU_ATTR.PORT)!]).toEqual([0x15, 0xb3]);
    expect(a.get(FOU_ATTR.AF)![0]).toBe(2);
    expect(a.get(FOU_ATTR.TYPE)![0]).toBe(1);
    expect(a.get(FOU_ATTR.IPPROTO)![0]).toBe(4);
  });

  test('IPv6, GUE, local and peer; decodes back', () => {
    const data = addAttrs({ port: 6080, family: 6, type: 'gue', local: 'fd00::1', peer: 'fd00::2', peerPort: 6081, ifindex: 3 });
    const a = attrs(data);
    expect(a.get(FOU_ATTR.AF)![0]).toBe(10);
    expect(a.get(FOU_ATTR.TYPE)![0]).toBe(2);
    expect(a.has(FOU_ATTR.IPPROTO)).toBe(false);
    expect(a.get(FOU_ATTR.LOCAL_V6)!.length).toBe(16);
    expect(parsePort(Buffer.concat(data))).toEqual({
      port: 6080,
      family: 6,
      type: 'gue',
      local: 'fd00::1',
      peer: 'fd00::2',
      peerPort: 6081,
      ifindex: 3,
    });
  });

  test('a key for DEL/GET carries no type or ipproto', () => {
    const a = attrs(keyAttrs({ port: 5555 }));
    expect([...a.keys()].sort()).toEqual([FOU_ATTR.PORT, FOU_ATTR.AF]);
  });

  test('bad arguments are TypeErrors', () => {
    expect(() => addAttrs({ port: 5555 })).toThrow(/direct FoU needs the payload's IP protocol/);
    expect(() => addAttrs({ port: -1, ipproto: 4 })).toThrow(/invalid port -1/);
    expect(() => addAttrs({ port: 1, ipproto: 4, family: 6, local: '10.0.0.1' })).toThrow(/expected an IPv6 address/);
    expect(() => keyAttrs({ port: 1, peer: '10.0.0.1' })).toThrow(/peer and peerPort go together/);
  });
});

describe('changeIpip / changeIp6tnl (changelink)', () => {
  // The request is encoded before any socket is touched: bad options never reach a kernel,
  // so a namespace handle that was never opened is enough here. The kernel side (index and
  // routes kept across an encap sport change) runs in e2e/kernel-lab/test/coil-egress.test.ts.
  const ns = { path: '/nonexistent', fd: -1, close: () => undefined } as unknown as import('../../src/netns/handle').Netns;

  test('exported next to the add functions', async () => {
    const tunnel = await import('../../src/tunnel');
    expect(typeof tunnel.changeIpip).toBe('function');
    expect(typeof tunnel.changeIp6tnl).toBe('function');
  });

  test('bad options are TypeErrors naming the field, as for add', async () => {
    const tunnel = await import('../../src/tunnel');
    expect(() => tunnel.changeIpip(ns, { name: 't', remote: '10.0.0.1', encap: { type: 'fou', dport: 70000 } })).toThrow(
      /invalid encap dport 70000/,
    );
    expect(() => tunnel.changeIp6tnl(ns, { name: 't', remote: '10.0.0.1' })).toThrow(/expected an IPv6 address/);
  });
});
