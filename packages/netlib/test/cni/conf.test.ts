import { CniError, ConfigError } from '../../src/errors';
import { parseNetConf, validAttachments, type NetConf } from '../../src/cni/conf';
import { thrownBy } from '@cnikit/netlib-testing';

const base = { cniVersion: '1.1.0', name: 'net1', type: 'veth' };
const json = (o: unknown): string => JSON.stringify(o);

const errorOf = (fn: () => unknown): CniError => thrownBy(CniError, fn);

describe('parseNetConf', () => {
  it('returns the raw object, unknown keys kept', () => {
    const conf = parseNetConf(Buffer.from(json({ ...base, mtu: 1400, ipam: { type: 'host-local', subnet: '10.1.0.0/24' } })));
    expect(conf).toEqual({ ...base, mtu: 1400, ipam: { type: 'host-local', subnet: '10.1.0.0/24' } });
  });

  it.each(['', '{', 'not json', '{"cniVersion": "1.1.0",}'])('malformed JSON %j is code 6', (input) => {
    const e = errorOf(() => parseNetConf(input));
    expect(e.code).toBe(6);
    expect(e.msg).toBe('failed to decode network config');
  });

  it.each(['[]', '"x"', '42', 'null'])('a JSON %s that is not an object is code 6', (input) => {
    expect(errorOf(() => parseNetConf(input)).code).toBe(6);
  });

  it.each([
    ['cniVersion', { name: 'n', type: 't' }],
    ['cniVersion', { ...base, cniVersion: '' }],
    ['cniVersion', { ...base, cniVersion: 1 }],
    ['name', { cniVersion: '1.1.0', type: 't' }],
    ['name', { ...base, name: '' }],
    ['name', { ...base, name: '-bad' }],
    ['name', { ...base, name: 'a b' }],
    ['type', { cniVersion: '1.1.0', name: 'n' }],
    ['type', { ...base, type: 7 }],
    ['ipam', { ...base, ipam: 'host-local' }],
    ['ipam.type', { ...base, ipam: { type: 3 } }],
    ['capabilities', { ...base, capabilities: { portMappings: 'yes' } }],
    ['runtimeConfig', { ...base, runtimeConfig: [] }],
    ['args', { ...base, args: 'x' }],
    ['dns', { ...base, dns: [] }],
    ['dns.nameservers', { ...base, dns: { nameservers: '8.8.8.8' } }],
    ['dns.domain', { ...base, dns: { domain: 1 } }],
  ])('missing or malformed %s is code 7 naming the field', (field, conf) => {
    const e = errorOf(() => parseNetConf(json(conf)));
    expect(e).toBeInstanceOf(ConfigError);
    expect(e.code).toBe(7);
    expect((e as ConfigError).field).toBe(field);
  });

  it('reads "ipam": {} as no IPAM', () => {
    const conf = parseNetConf(json({ ...base, ipam: {} }));
    expect(conf).toEqual(base);
    expect('ipam' in conf).toBe(false);
  });

  it('an ipam object without a type is code 7', () => {
    expect(errorOf(() => parseNetConf(json({ ...base, ipam: { subnet: '10.1.0.0/24' } })))).toMatchObject({ code: 7, field: 'ipam.type' });
  });

  it.each(['0.1.0', '0.2.0', '1.2.0', '2.0.0', 'banana'])('unknown cniVersion %s is code 1 listing the supported versions', (v) => {
    const e = errorOf(() => parseNetConf(json({ ...base, cniVersion: v })));
    expect(e.code).toBe(1);
    expect(e.msg).toBe('incompatible CNI versions');
    expect(e.details).toBe(`config is ${JSON.stringify(v)}, plugin supports ["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]`);
  });

  it('checks the version against the plugin list', () => {
    const e = errorOf(() => parseNetConf(json({ ...base, cniVersion: '0.3.1' }), { versions: ['1.0.0', '1.1.0'] }));
    expect(e.code).toBe(1);
    expect(e.details).toContain('["1.0.0","1.1.0"]');
  });
});

describe('validAttachments', () => {
  const list = [
    { containerID: 'c1', ifname: 'eth0' },
    { containerID: 'c2', ifname: 'net1' },
  ];
  const conf = (extra: object): NetConf => ({ ...base, ...extra }) as NetConf;

  it('reads cni.dev/valid-attachments', () => {
    expect(validAttachments(conf({ 'cni.dev/valid-attachments': list }))).toEqual(list);
  });
  it('falls back to the legacy cni.dev/attachments', () => {
    expect(validAttachments(conf({ 'cni.dev/attachments': list }))).toEqual(list);
  });
  it('prefers valid-attachments when both are sent (libcni sends both)', () => {
    expect(validAttachments(conf({ 'cni.dev/valid-attachments': list, 'cni.dev/attachments': [] }))).toEqual(list);
  });
  it('accepts an empty list: nothing is live', () => {
    expect(validAttachments(conf({ 'cni.dev/valid-attachments': [] }))).toEqual([]);
  });
  it('is code 7 when absent: GC must not delete everything', () => {
    expect(errorOf(() => validAttachments(conf({}))).code).toBe(7);
  });
  it.each([[{}], ['x'], [[{ containerID: 'c1' }]], [[{ containerID: '', ifname: 'eth0' }]], [[null]]])(
    'is code 7 for malformed %j',
    (bad) => {
      expect(errorOf(() => validAttachments(conf({ 'cni.dev/valid-attachments': bad }))).code).toBe(7);
    },
  );
});
