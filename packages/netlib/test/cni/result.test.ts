import { CniError } from '../../src/errors';
import { SUPPORTED_VERSIONS } from '../../src/cni/version';
import { convertResult, parseResult, type Result } from '../../src/cni/result';

const LEGACY = ['0.3.0', '0.3.1', '0.4.0'];
const isLegacy = (v: string): boolean => LEGACY.includes(v);

/** A 1.x result using every field, 1.1.0 additions included. */
function modern(v: string): Record<string, unknown> {
  return {
    cniVersion: v,
    interfaces: [
      { name: 'veth1a2b', mac: 'aa:bb:cc:dd:ee:01', mtu: 1450 },
      {
        name: 'eth0',
        mac: 'aa:bb:cc:dd:ee:02',
        mtu: 1450,
        sandbox: '/var/run/netns/c1',
        socketPath: '/run/vhu.sock',
        pciID: '0000:00:1f.6',
      },
    ],
    ips: [
      { interface: 1, address: '10.1.0.5/24', gateway: '10.1.0.1' },
      { interface: 1, address: 'fd00::5/64', gateway: 'fd00::1' },
    ],
    routes: [
      { dst: '0.0.0.0/0', gw: '10.1.0.1', mtu: 1400, advmss: 1360, priority: 100, table: 116, scope: 0 },
      { dst: '::/0', gw: 'fd00::1' },
      { dst: '10.2.0.0/16', scope: 253 },
    ],
    dns: { nameservers: ['10.96.0.10'], domain: 'cluster.local', search: ['default.svc.cluster.local'], options: ['ndots:5'] },
  };
}

/** The same result as 0.3.x/0.4.0 write it: ips[].version, interfaces with name/mac/sandbox only, routes whole. */
function legacy(v: string): Record<string, unknown> {
  const m = modern(v);
  return {
    ...m,
    interfaces: [
      { name: 'veth1a2b', mac: 'aa:bb:cc:dd:ee:01' },
      { name: 'eth0', mac: 'aa:bb:cc:dd:ee:02', sandbox: '/var/run/netns/c1' },
    ],
    ips: [
      { version: '4', interface: 1, address: '10.1.0.5/24', gateway: '10.1.0.1' },
      { version: '6', interface: 1, address: 'fd00::5/64', gateway: 'fd00::1' },
    ],
  };
}

/** A legacy result read into a 1.x version: the interface fields were never there. */
function upgraded(v: string): Record<string, unknown> {
  return { ...legacy(v), ips: modern(v).ips as object[] };
}

const fixture = (v: string): Record<string, unknown> => (isLegacy(v) ? legacy(v) : modern(v));

describe('convertResult: every version pair', () => {
  const pairs: [string, string][] = [];
  for (const from of SUPPORTED_VERSIONS) for (const to of SUPPORTED_VERSIONS) pairs.push([from, to]);

  it.each(pairs)('%s -> %s', (from, to) => {
    const parsed = parseResult(fixture(from));
    expect(parsed.cniVersion).toBe(from);
    const out = convertResult(parsed, to);
    const expected = isLegacy(to) ? legacy(to) : isLegacy(from) ? upgraded(to) : modern(to);
    expect(out).toEqual(expected);
    // The output of one conversion is valid input of the next.
    expect(parseResult(JSON.parse(JSON.stringify(out))).cniVersion).toBe(to);
  });

  it('1.1.0 -> 1.0.0 changes only cniVersion', () => {
    const { cniVersion: _a, ...rest11 } = modern('1.1.0');
    const { cniVersion, ...rest10 } = convertResult(parseResult(modern('1.1.0')), '1.0.0');
    expect(cniVersion).toBe('1.0.0');
    expect(rest10).toEqual(rest11);
  });

  it('adds ips[].version from the address family when going down', () => {
    const r: Result = { cniVersion: '1.1.0', ips: [{ address: '192.168.1.2/32' }, { address: '2001:db8::2/128' }] };
    expect(convertResult(r, '0.3.1').ips).toEqual([
      { version: '4', address: '192.168.1.2/32' },
      { version: '6', address: '2001:db8::2/128' },
    ]);
  });

  it('writes an IPAM result without interfaces or indexes', () => {
    const r: Result = { cniVersion: '1.0.0', ips: [{ address: '10.1.0.5/24', gateway: '10.1.0.1' }], dns: {} };
    expect(convertResult(r, '1.0.0')).toEqual({ cniVersion: '1.0.0', ips: [{ address: '10.1.0.5/24', gateway: '10.1.0.1' }] });
  });

  it.each(['0.2.0', '1.2.0', 'x'])('refuses to convert to %s with code 1', (v) => {
    expect(() => convertResult({ cniVersion: '1.1.0' }, v)).toThrow(expect.objectContaining({ code: 1 }));
  });
});

describe('parseResult', () => {
  it('accepts JSON text and Buffers', () => {
    const text = JSON.stringify(modern('1.1.0'));
    expect(parseResult(text)).toEqual(parseResult(Buffer.from(text)));
  });

  it('reads a result as the given version (prevResult as the config version)', () => {
    expect(parseResult({ ips: [{ address: '10.1.0.5/24' }] }, { version: '1.0.0' }).cniVersion).toBe('1.0.0');
  });

  it('treats null like absent and drops empty dns', () => {
    expect(parseResult({ cniVersion: '1.0.0', interfaces: null, ips: [{ address: '10.1.0.5/24', gateway: null }], dns: {} })).toEqual({
      cniVersion: '1.0.0',
      ips: [{ address: '10.1.0.5/24' }],
    });
  });

  it('accepts a legacy ip without version (infers it)', () => {
    expect(parseResult({ cniVersion: '0.4.0', ips: [{ address: '10.1.0.5/24' }] }).ips).toEqual([{ address: '10.1.0.5/24' }]);
  });

  it('invalid JSON is code 6', () => {
    expect(() => parseResult('{')).toThrow(expect.objectContaining({ code: 6 }));
  });

  it('an unsupported version is code 1', () => {
    expect(() => parseResult({ cniVersion: '0.2.0', ip4: { ip: '10.1.0.5/24' } })).toThrow(expect.objectContaining({ code: 1 }));
  });

  const malformed: [string, unknown, string][] = [
    ['not an object', [], 'result'],
    ['no version', { ips: [] }, 'result.cniVersion'],
    ['interfaces not an array', { cniVersion: '1.0.0', interfaces: {} }, 'result.interfaces'],
    ['interface without name', { cniVersion: '1.0.0', interfaces: [{ mac: 'aa' }] }, 'result.interfaces[0].name'],
    ['interface mtu negative', { cniVersion: '1.1.0', interfaces: [{ name: 'e', mtu: -1 }] }, 'result.interfaces[0].mtu'],
    ['ip address without prefix', { cniVersion: '1.0.0', ips: [{ address: '10.1.0.5' }] }, 'result.ips[0].address'],
    ['ip address garbage', { cniVersion: '1.0.0', ips: [{ address: 'ten/8' }] }, 'result.ips[0].address'],
    [
      'gateway of the other family',
      { cniVersion: '1.0.0', ips: [{ address: '10.1.0.5/24', gateway: 'fd00::1' }] },
      'result.ips[0].gateway',
    ],
    [
      'version contradicting the address',
      { cniVersion: '0.4.0', ips: [{ version: '6', address: '10.1.0.5/24' }] },
      'result.ips[0].version',
    ],
    [
      'interface index out of range',
      { cniVersion: '1.0.0', interfaces: [{ name: 'e' }], ips: [{ address: '10.1.0.5/24', interface: 1 }] },
      'result.ips[0].interface',
    ],
    [
      'interface index without interfaces',
      { cniVersion: '1.0.0', ips: [{ address: '10.1.0.5/24', interface: 0 }] },
      'result.ips[0].interface',
    ],
    [
      'interface index not an integer',
      { cniVersion: '1.0.0', interfaces: [{ name: 'e' }], ips: [{ address: '10.1.0.5/24', interface: '0' }] },
      'result.ips[0].interface',
    ],
    ['route without dst', { cniVersion: '1.0.0', routes: [{ gw: '10.1.0.1' }] }, 'result.routes[0].dst'],
    ['route gw garbage', { cniVersion: '1.0.0', routes: [{ dst: '0.0.0.0/0', gw: 'x' }] }, 'result.routes[0].gw'],
    ['route table not a number', { cniVersion: '1.1.0', routes: [{ dst: '0.0.0.0/0', table: 'main' }] }, 'result.routes[0].table'],
    ['dns nameservers not an array', { cniVersion: '1.0.0', dns: { nameservers: '8.8.8.8' } }, 'result.dns.nameservers'],
    ['dns search entry not a string', { cniVersion: '1.0.0', dns: { search: [1] } }, 'result.dns.search[0]'],
  ];
  it.each(malformed)('%s: code 7 naming %s', (_label, raw, field) => {
    let err: unknown;
    try {
      parseResult(raw);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(CniError);
    expect((err as CniError).code).toBe(7);
    expect((err as CniError).msg).toBe(`invalid ${field}`);
    expect((err as CniError).details).toMatch(/^expected .+, got /);
  });

  it('uses the code and field name it is given', () => {
    expect(() => parseResult({ cniVersion: '1.0.0', ips: 1 }, { code: 6, field: 'delegate result' })).toThrow(
      expect.objectContaining({ code: 6, msg: 'invalid delegate result.ips' }),
    );
  });
});
