/** Pure encoders and decoders: no namespace needed. */
import { attr, attrList, nest, parseAttrs, readStr, readU32, str, u32 } from '../../src/nl/attrs';
import { errnoName, toNetlinkError, KernelErrno } from '../../src/nl/errors';
import { broadcastOf, formatIp, formatMac, parseIp, parseMac, parsePrefix } from '../../src/nl/inet';
import { NetlinkError } from '../../src/errors';
import * as sysctl from '../../src/sysctl';
import { tickInUsec, xmitTicks } from '../../src/tc/psched';
import * as tc from '../../src/tc';

describe('addresses', () => {
  test.each([
    ['10.1.2.3', '10.1.2.3'],
    ['0.0.0.0', '0.0.0.0'],
    ['::', '::'],
    ['::1', '::1'],
    ['fd00:0:0:0:0:0:0:5', 'fd00::5'],
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'],
    ['2001:0db8:0000:0001:0000:0000:0000:0001', '2001:db8:0:1::1'],
    ['fe80::1:2:3:4', 'fe80::1:2:3:4'],
    ['1:0:2:0:3:0:4:0', '1:0:2:0:3:0:4:0'],
    ['::ffff:10.0.0.1', '::ffff:10.0.0.1'],
    ['64:ff9b::192.0.2.33', '64:ff9b::c000:221'],
    ['FD00::ABCD', 'fd00::abcd'],
  ])('%s round-trips as %s', (input, text) => {
    const { bytes } = parseIp(input);
    expect(formatIp(bytes)).toBe(text);
    expect(parseIp(text).bytes).toEqual(bytes);
  });

  test('invalid addresses and prefixes are TypeErrors', () => {
    for (const bad of ['10.0.0.256', 'fe80::1%eth0', 'x', '', '1.2.3']) expect(() => parseIp(bad)).toThrow(TypeError);
    for (const bad of ['10.0.0.0/33', 'fd00::/129', '10.0.0.0/', '10.0.0.0/-1', '10.0.0.0/2x'])
      expect(() => parsePrefix(bad)).toThrow(TypeError);
  });

  test('prefixes, broadcast and MACs', () => {
    expect(parsePrefix('10.1.0.5/24')).toMatchObject({ family: 4, prefixLen: 24 });
    expect(parsePrefix('fd00::1')).toMatchObject({ family: 6, prefixLen: 128 });
    expect(formatIp(broadcastOf(parsePrefix('10.1.0.5/24')))).toBe('10.1.0.255');
    expect(formatIp(broadcastOf(parsePrefix('10.1.0.5/0')))).toBe('255.255.255.255');
    expect(formatIp(broadcastOf(parsePrefix('10.1.0.5/30')))).toBe('10.1.0.7');
    expect(formatMac(parseMac('02:AB:cd:00:00:01'))).toBe('02:ab:cd:00:00:01');
    expect(() => parseMac('02:ab:cd:00:00:1')).toThrow(TypeError);
  });
});

describe('attributes', () => {
  test('TLVs are padded to 4 bytes and nest', () => {
    const a = attr(3, str('eth0')); // 4 + 5 bytes, padded to 12
    expect(a.length).toBe(12);
    expect(a.readUInt16LE(0)).toBe(9);
    const n = nest(18, attr(1, str('veth')), attr(2, u32(7)));
    const outer = parseAttrs(n);
    const inner = attrList(outer.get(18)!);
    expect(inner.map(([t]) => t)).toEqual([1, 2]);
    expect(readStr(inner[0]![1])).toBe('veth');
    expect(readU32(inner[1]![1])).toBe(7);
  });

  test('a truncated stream stops at the last whole attribute', () => {
    const b = Buffer.concat([attr(1, u32(1)), Buffer.from([0xff, 0x00, 0x02])]);
    expect([...parseAttrs(b).keys()]).toEqual([1]);
  });
});

describe('errors', () => {
  test('errno numbers get their kernel names', () => {
    expect(errnoName(-17)).toBe('EEXIST');
    expect(errnoName(19)).toBe('ENODEV');
    expect(errnoName(-95)).toBe('EOPNOTSUPP');
    expect(errnoName(-11)).toBe('EAGAIN');
    expect(errnoName(-4095)).toBe('errno 4095');
  });

  test('toNetlinkError names the operation and keeps the cause', () => {
    const cause = new KernelErrno(-17);
    const e = toNetlinkError('add route', '10.1.0.0/24 table 116', cause) as NetlinkError;
    expect(e).toBeInstanceOf(NetlinkError);
    expect(e.message).toBe('netlink: add route 10.1.0.0/24 table 116: EEXIST');
    expect(e.cause).toBe(cause);
    const sys = toNetlinkError('add link', 'x', Object.assign(new Error('send'), { code: 'ENOBUFS' })) as NetlinkError;
    expect(sys.errno).toBe('ENOBUFS');
    const bug = new TypeError('bad');
    expect(toNetlinkError('add link', 'x', bug)).toBe(bug);
  });
});

describe('sysctl keys', () => {
  test.each([
    ['net/ipv4/ip_forward', '/proc/sys/net/ipv4/ip_forward'],
    ['/proc/sys/net/ipv4/ip_forward', '/proc/sys/net/ipv4/ip_forward'],
    ['net.ipv4.ip_forward', '/proc/sys/net/ipv4/ip_forward'],
    ['net.ipv4.conf.all.rp_filter', '/proc/sys/net/ipv4/conf/all/rp_filter'],
    ['net.ipv4.conf.eth0.100.rp_filter', '/proc/sys/net/ipv4/conf/eth0.100/rp_filter'],
    ['net.ipv6.conf.eth0.100.disable_ipv6', '/proc/sys/net/ipv6/conf/eth0.100/disable_ipv6'],
    ['net.ipv6.neigh.a.b.c.base_reachable_time_ms', '/proc/sys/net/ipv6/neigh/a.b.c/base_reachable_time_ms'],
    ['net/ipv4/conf/eth0.100/rp_filter', '/proc/sys/net/ipv4/conf/eth0.100/rp_filter'],
    ['net.core.somaxconn', '/proc/sys/net/core/somaxconn'],
  ])('%s -> %s', (key, path) => expect(sysctl.sysctlPath(key)).toBe(path));

  test.each(['', 'net/../../etc/passwd', 'net//ipv4', '../x'])('rejects %j', (key) =>
    expect(() => sysctl.sysctlPath(key)).toThrow(TypeError),
  );
});

describe('tc arithmetic', () => {
  test('ticks follow /proc/net/psched (64 ns ticks)', () => {
    expect(tickInUsec()).toBe(15.625);
    // 8 bytes at 125000 B/s take 64 us = 1000 ticks; 10240 bytes take 81920 us.
    expect(xmitTicks(125_000, 8)).toBe(1000);
    expect(xmitTicks(125_000, 10240)).toBe(1_280_000);
  });

  test('handles', () => {
    expect(tc.handle(1)).toBe(0x10000);
    expect(tc.handle(0xffff)).toBe(tc.INGRESS_HANDLE);
    expect(tc.handle(1, 0x30)).toBe(0x10030);
    expect(tc.bitsToBytes(1_000_000)).toBe(125_000);
  });
});
