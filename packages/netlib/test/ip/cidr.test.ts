import * as ip from '../../src/ip';

describe('parseCidr', () => {
  it.each([
    ['10.1.0.5/24', { address: '10.1.0.5', prefix: 24, family: 4, network: '10.1.0.0/24' }],
    ['10.1.0.0/24', { address: '10.1.0.0', prefix: 24, family: 4, network: '10.1.0.0/24' }],
    ['0.0.0.0/0', { address: '0.0.0.0', prefix: 0, family: 4, network: '0.0.0.0/0' }],
    ['255.255.255.255/32', { address: '255.255.255.255', prefix: 32, family: 4, network: '255.255.255.255/32' }],
    ['192.168.1.7/31', { address: '192.168.1.7', prefix: 31, family: 4, network: '192.168.1.6/31' }],
    ['2001:DB8:0:0::5/64', { address: '2001:db8::5', prefix: 64, family: 6, network: '2001:db8::/64' }],
    ['::/0', { address: '::', prefix: 0, family: 6, network: '::/0' }],
    ['fd00::1/128', { address: 'fd00::1', prefix: 128, family: 6, network: 'fd00::1/128' }],
    ['2001:db8:0:1:0:0:0:1/127', { address: '2001:db8:0:1::1', prefix: 127, family: 6, network: '2001:db8:0:1::/127' }],
    ['1:0:0:2:0:0:0:3/64', { address: '1:0:0:2::3', prefix: 64, family: 6, network: '1:0:0:2::/64' }],
    ['::ffff:10.1.0.5/120', { address: '::ffff:10.1.0.5', prefix: 120, family: 6, network: '::ffff:10.1.0.0/120' }],
    ['fe80::1:2/10', { address: 'fe80::1:2', prefix: 10, family: 6, network: 'fe80::/10' }],
  ])('%s', (input, expected) => {
    expect(ip.parseCidr(input)).toEqual(expected);
    expect(ip.isValidCidr(input)).toBe(true);
  });

  it.each([
    '',
    '10.1.0.5',
    '10.1.0.5/',
    '/24',
    '10.1.0.5/33',
    '10.1.0.5/-1',
    '10.1.0.5/024',
    '10.1.0.5/24/24',
    '10.1.0.5/ 24',
    ' 10.1.0.5/24',
    '10.1.0.5/24 ',
    '10.1.0/24',
    '10.1.0.256/24',
    '010.1.0.5/24',
    '10.1.0.5.6/24',
    '1e1.1.0.5/24',
    'fd00::/129',
    'fd00::/064',
    'fe80::1%eth0/64',
    'fd00:::1/64',
    '1::2::3/64',
    '1:2:3:4:5:6:7:8:9/64',
    'gg::1/64',
    '::ffff:010.1.0.5/120',
    'localhost/8',
    'ten.one/8',
  ])('rejects %j', (input) => {
    expect(ip.isValidCidr(input)).toBe(false);
    expect(() => ip.parseCidr(input)).toThrow(ip.AddressFormatError);
  });

  it('names the value and the expected form in the error', () => {
    expect(() => ip.parseCidr('10.1.0.5/33')).toThrow('ip: invalid CIDR "10.1.0.5/33": expected <address>/<prefix>');
  });

  it.each([[undefined], [null], [42], [{}]])('isValidCidr(%j) is false for non-strings', (v) => {
    expect(ip.isValidCidr(v)).toBe(false);
    expect(ip.isValidIp(v)).toBe(false);
  });
});

describe('addresses', () => {
  it.each([
    ['10.1.0.5', '10.1.0.5', 4],
    ['0.0.0.0', '0.0.0.0', 4],
    ['2001:0DB8:0000:0000:0000:0000:0000:0001', '2001:db8::1', 6],
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1', 6],
    ['1:2:3:4:5:6:7:0', '1:2:3:4:5:6:7:0', 6],
    ['::', '::', 6],
    ['::1', '::1', 6],
    ['::ffff:1.2.3.4', '::ffff:1.2.3.4', 6],
    ['::ffff:102:304', '::ffff:1.2.3.4', 6],
  ])('canonical form of %s is %s', (input, canonical, family) => {
    expect(ip.canonicalIp(input)).toBe(canonical);
    expect(ip.familyOf(input)).toBe(family);
    expect(ip.parseIp(input)).toEqual({ address: canonical, family });
  });

  it.each([
    '',
    '1.2.3',
    '1.2.3.4/32',
    '01.2.3.4',
    '1.2.3.00',
    '1..2.3',
    '.1.2.3',
    '1.2.3.',
    '1.2.3.4.',
    '+1.2.3.4',
    '1.2.3.-4',
    '1.2.3.1000',
    '255.255.255.256',
    'fe80::1%eth0',
    '::/0',
    'x',
  ])('isValidIp(%j) is false', (s) => {
    expect(ip.isValidIp(s)).toBe(false);
  });

  it.each([
    ['0.0.0.0', '0.0.0.0/0'],
    ['255.255.255.255', '255.255.255.255/32'],
    ['100.64.0.9', '100.64.0.9/10'],
  ])('isValidIp(%j) and isValidCidr(%j) are true', (a, cidr) => {
    expect(ip.isValidIp(a)).toBe(true);
    expect(ip.isValidCidr(cidr)).toBe(true);
  });

  it('familyOf accepts CIDRs and rejects garbage', () => {
    expect(ip.familyOf('fd00::/8')).toBe(6);
    expect(ip.familyOf('10.0.0.0/8')).toBe(4);
    expect(() => ip.familyOf('nope')).toThrow(ip.AddressFormatError);
  });

  it('canonicalCidr keeps host bits', () => {
    expect(ip.canonicalCidr('2001:DB8:0::5/64')).toBe('2001:db8::5/64');
  });

  it('orders addresses, IPv4 before IPv6', () => {
    const sorted = ['fd00::2', '10.0.0.10', '10.0.0.9', '::1', '9.255.255.255'].sort(ip.compareIps);
    expect(sorted).toEqual(['9.255.255.255', '10.0.0.9', '10.0.0.10', '::1', 'fd00::2']);
    expect(ip.compareIps('10.0.0.1', '10.0.0.1')).toBe(0);
  });

  it.each([
    ['10.0.0.255', 1, '10.0.1.0'],
    ['10.0.1.0', -1, '10.0.0.255'],
    ['0.0.0.0', 0, '0.0.0.0'],
    ['fd00::ffff', 1, 'fd00::1:0'],
    ['::', 1n, '::1'],
  ])('offsetIp(%s, %s) = %s', (a, n, expected) => {
    expect(ip.offsetIp(a, n)).toBe(expected);
  });

  it('refuses to step past the ends of the address space', () => {
    expect(() => ip.nextIp('255.255.255.255')).toThrow(RangeError);
    expect(() => ip.prevIp('0.0.0.0')).toThrow(RangeError);
    expect(() => ip.nextIp('ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff')).toThrow(RangeError);
    expect(() => ip.offsetIp('10.0.0.1', 1.5)).toThrow(RangeError);
  });

  it('converts to and from bigint', () => {
    expect(ip.ipToBigInt('10.0.0.1')).toBe(0x0a000001n);
    expect(ip.bigIntToIp(0x0a000001n, 4)).toBe('10.0.0.1');
    expect(ip.ipToBigInt('::ffff:ffff')).toBe(0xffffffffn);
    expect(ip.bigIntToIp((1n << 128n) - 1n, 6)).toBe('ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff');
    expect(() => ip.bigIntToIp(1n << 32n, 4)).toThrow(RangeError);
    expect(() => ip.bigIntToIp(-1n, 6)).toThrow(RangeError);
  });

  it.each([
    [0, 4, '0.0.0.0'],
    [24, 4, '255.255.255.0'],
    [27, 4, '255.255.255.224'],
    [32, 4, '255.255.255.255'],
    [64, 6, 'ffff:ffff:ffff:ffff::'],
    [128, 6, 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'],
  ] as const)('prefixToMask(%d, %d) = %s', (prefix, family, mask) => {
    expect(ip.prefixToMask(prefix, family)).toBe(mask);
  });
  it('prefixToMask rejects out-of-range prefixes', () => {
    expect(() => ip.prefixToMask(33)).toThrow(RangeError);
    expect(() => ip.prefixToMask(129, 6)).toThrow(RangeError);
  });
});

describe('network arithmetic', () => {
  it.each([
    ['10.1.0.5/24', '10.1.0.0/24', '10.1.0.255', 256n, '10.1.0.1', '10.1.0.254'],
    ['10.1.0.5/32', '10.1.0.5/32', '10.1.0.5', 1n, '10.1.0.5', '10.1.0.5'],
    ['10.1.0.5/31', '10.1.0.4/31', '10.1.0.5', 2n, '10.1.0.4', '10.1.0.5'],
    ['10.1.0.5/30', '10.1.0.4/30', '10.1.0.7', 4n, '10.1.0.5', '10.1.0.6'],
    ['0.0.0.0/0', '0.0.0.0/0', '255.255.255.255', 1n << 32n, '0.0.0.1', '255.255.255.254'],
    ['fd00::5/64', 'fd00::/64', 'fd00::ffff:ffff:ffff:ffff', 1n << 64n, 'fd00::1', 'fd00::ffff:ffff:ffff:ffff'],
    ['fd00::5/128', 'fd00::5/128', 'fd00::5', 1n, 'fd00::5', 'fd00::5'],
    ['fd00::5/127', 'fd00::4/127', 'fd00::5', 2n, 'fd00::4', 'fd00::5'],
    ['::/0', '::/0', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 1n << 128n, '::1', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'],
  ])('%s: network %s, broadcast %s, size %s, hosts %s-%s', (cidr, network, last, count, first, lastH) => {
    expect(ip.networkOf(cidr)).toBe(network);
    expect(ip.broadcast(cidr)).toBe(last);
    expect(ip.size(cidr)).toBe(count);
    expect(ip.firstHost(cidr)).toBe(first);
    expect(ip.lastHost(cidr)).toBe(lastH);
  });

  it.each([
    ['10.1.0.5/24', true],
    ['10.1.0.0/24', false],
    ['10.1.0.5/32', false],
    ['0.0.0.0/0', false],
    ['1.0.0.0/0', true],
    ['fd00::1/64', true],
    ['fd00::/64', false],
  ])('hasHostBits(%s) = %s', (cidr, expected) => {
    expect(ip.hasHostBits(cidr)).toBe(expected);
  });

  it.each([
    ['10.1.0.0/24', '10.1.0.0', true],
    ['10.1.0.0/24', '10.1.0.255', true],
    ['10.1.0.0/24', '10.1.1.0', false],
    ['10.1.0.7/24', '10.1.0.200', true],
    ['0.0.0.0/0', '255.255.255.255', true],
    ['10.1.0.5/32', '10.1.0.5', true],
    ['10.1.0.5/32', '10.1.0.6', false],
    ['10.1.0.0/24', '10.1.0.128/25', true],
    ['10.1.0.0/24', '10.1.0.0/23', false],
    ['10.1.0.0/24', 'fd00::1', false],
    ['::/0', '10.1.0.1', false],
    ['::/0', 'fd00::1', true],
    ['fd00::/64', 'fd00::ffff:ffff:ffff:ffff', true],
    ['fd00::/64', 'fd00:0:0:1::', false],
    ['fd00::1/128', 'fd00::1', true],
  ])('contains(%s, %s) = %s', (cidr, x, expected) => {
    expect(ip.contains(cidr, x)).toBe(expected);
  });

  it('contains rejects garbage', () => {
    expect(() => ip.contains('10.1.0.0/24', 'x')).toThrow(ip.AddressFormatError);
    expect(() => ip.contains('10.1.0.0', '10.1.0.1')).toThrow(ip.AddressFormatError);
  });

  it.each([
    ['10.1.0.0/24', '10.1.0.128/25', true],
    ['10.1.0.0/24', '10.1.1.0/24', false],
    ['10.0.0.0/8', '10.255.0.0/16', true],
    ['0.0.0.0/0', '192.168.0.0/16', true],
    ['fd00::/8', 'fd12::/16', true],
    ['fd00::/16', 'fd01::/16', false],
    ['10.0.0.0/8', '::/0', false],
  ])('overlaps(%s, %s) = %s', (a, b, expected) => {
    expect(ip.overlaps(a, b)).toBe(expected);
    expect(ip.overlaps(b, a)).toBe(expected);
  });

  it.each([
    ['10.1.0.0/24', 0, '10.1.0.0'],
    ['10.1.0.0/24', 1, '10.1.0.1'],
    ['10.1.0.0/24', 255, '10.1.0.255'],
    ['10.1.0.0/24', -1, '10.1.0.255'],
    ['10.1.0.0/24', -256, '10.1.0.0'],
    ['10.1.0.9/32', 0, '10.1.0.9'],
    ['fd00::/64', 10, 'fd00::a'],
    ['fd00::/64', -1n, 'fd00::ffff:ffff:ffff:ffff'],
    ['::/0', (1n << 128n) - 1n, 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'],
  ])('nthAddress(%s, %s) = %s', (cidr, n, expected) => {
    expect(ip.nthAddress(cidr, n)).toBe(expected);
  });

  it.each([
    ['10.1.0.0/24', 256],
    ['10.1.0.0/24', -257],
    ['10.1.0.9/32', 1],
    ['fd00::/120', 256],
  ])('nthAddress(%s, %d) is outside the network', (cidr, n) => {
    expect(() => ip.nthAddress(cidr, n)).toThrow(RangeError);
  });

  it('indexOf is the inverse of nthAddress', () => {
    expect(ip.indexOf('10.1.0.0/24', '10.1.0.77')).toBe(77n);
    expect(ip.indexOf('fd00::/64', 'fd00::1:0')).toBe(65536n);
    expect(() => ip.indexOf('10.1.0.0/24', '10.1.1.0')).toThrow(RangeError);
    expect(() => ip.indexOf('10.1.0.0/24', 'fd00::1')).toThrow(RangeError);
  });
});

describe('splitting a pool into blocks', () => {
  it('splits an IPv4 pool', () => {
    expect(ip.splitCidr('10.1.0.0/24', 26)).toEqual(['10.1.0.0/26', '10.1.0.64/26', '10.1.0.128/26', '10.1.0.192/26']);
    expect(ip.splitCidr('10.1.0.77/24', 24)).toEqual(['10.1.0.0/24']);
    expect(ip.splitCidr('10.1.0.0/30', 32)).toEqual(['10.1.0.0/32', '10.1.0.1/32', '10.1.0.2/32', '10.1.0.3/32']);
  });

  it('splits an IPv6 pool', () => {
    expect(ip.splitCidr('fd00::/62', 64)).toEqual(['fd00::/64', 'fd00:0:0:1::/64', 'fd00:0:0:2::/64', 'fd00:0:0:3::/64']);
  });

  it('counts and indexes blocks lazily for huge splits', () => {
    expect(ip.blockCount('fd00::/48', 112)).toBe(1n << 64n);
    expect(ip.nthBlock('fd00::/48', 112, 0)).toBe('fd00::/112');
    expect(ip.nthBlock('fd00::/48', 112, 1)).toBe('fd00::1:0/112');
    expect(ip.nthBlock('fd00::/48', 112, -1)).toBe('fd00::ffff:ffff:ffff:ffff:0/112');
    expect(ip.nthBlock('10.0.0.0/8', 26, 262143)).toBe('10.255.255.192/26');
    expect(() => ip.splitCidr('fd00::/48', 112)).toThrow(/more than the limit 65536/);
    expect(ip.splitCidr('10.0.0.0/16', 26, { max: 1024 })).toHaveLength(1024);
  });

  it('finds the block of an address', () => {
    expect(ip.blockIndexOf('10.1.0.0/16', 26, '10.1.1.70')).toBe(5n);
    expect(ip.nthBlock('10.1.0.0/16', 26, 5)).toBe('10.1.1.64/26');
    expect(() => ip.blockIndexOf('10.1.0.0/16', 26, '10.2.0.1')).toThrow(RangeError);
  });

  it.each([
    ['10.1.0.0/24', 23],
    ['10.1.0.0/24', 33],
    ['10.1.0.0/24', 25.5],
    ['fd00::/64', 129],
  ])('rejects block prefix %s -> /%s', (pool, prefix) => {
    expect(() => ip.blockCount(pool, prefix)).toThrow(RangeError);
    expect(() => ip.splitCidr(pool, prefix)).toThrow(RangeError);
  });

  it('nthBlock rejects an index outside the pool', () => {
    expect(() => ip.nthBlock('10.1.0.0/24', 26, 4)).toThrow(RangeError);
    expect(() => ip.nthBlock('10.1.0.0/24', 26, -5)).toThrow(RangeError);
  });
});

describe('ipToMacV4', () => {
  it.each([
    ['0a:58', '10.1.0.5', '0a:58:0a:01:00:05'],
    ['02:42', '172.17.0.2', '02:42:ac:11:00:02'],
    ['0A:58', '255.255.255.255', '0a:58:ff:ff:ff:ff'],
    ['00:00', '0.0.0.0', '00:00:00:00:00:00'],
  ])('%s + %s = %s', (prefix, addr, mac) => {
    expect(ip.ipToMacV4(prefix, addr)).toBe(mac);
  });

  it.each([
    ['0a58', '10.1.0.5'],
    ['0a:58:00', '10.1.0.5'],
    ['zz:58', '10.1.0.5'],
    ['01:00', '10.1.0.5'], // multicast bit
    ['0a:58', 'fd00::5'],
    ['0a:58', '10.1.0.5/24'],
    ['0a:58', '10.1.0'],
  ])('rejects prefix %j with address %j', (prefix, addr) => {
    expect(() => ip.ipToMacV4(prefix, addr)).toThrow(ip.AddressFormatError);
  });
});

describe('start-up cost', () => {
  it('IPv4 work never loads ip-address (only IPv6 text needs it)', () => {
    jest.isolateModules(() => {
      jest.doMock('ip-address', () => {
        throw new Error('ip-address loaded');
      });
      const fresh = require('../../src/ip') as typeof ip;
      expect(fresh.parseCidr('10.1.0.5/24').network).toBe('10.1.0.0/24');
      expect(fresh.splitCidr('10.1.0.0/24', 26)).toHaveLength(4);
      expect(fresh.ipToMacV4('0a:58', '10.1.0.5')).toBe('0a:58:0a:01:00:05');
      expect(() => fresh.parseCidr('fd00::/64')).toThrow('ip-address loaded');
    });
  });
});

describe('agreement with node:net on tricky addresses (zones aside, which we reject)', () => {
  const { isIP } = require('node:net') as typeof import('node:net');
  it.each([
    '1:2:3:4:5:6:7:8::',
    '::1:2:3:4:5:6:7:8',
    '1::',
    ':::',
    '1:2:3:4:5:6:7::8',
    '1:2:3:4:5:6::7:8',
    '::ffff:1.2.3',
    '1:2:3:4:5:6:1.2.3.4',
    '1:2:3:4:5:6:7:1.2.3.4',
    '::1.2.3.4.5',
    'FE80::A',
    '12345::1',
    '1:2',
    '1::2:',
    ':1::2',
    '[::1]',
    '::ffff:256.1.1.1',
    '0:0:0:0:0:0:0:0',
    '1.2.3.04',
    '1..2.3',
    '1:2:3:4:5:6:7:8:9',
  ])('%s', (s) => {
    expect(ip.isValidIp(s)).toBe(isIP(s) !== 0);
  });
});
