import type { NetConf } from '../../src/cni/conf';
import { optionalPrevResultOf, prevResultOf } from '../../src/cni/prev-result';

const conf = (extra: Partial<NetConf>): NetConf => ({ cniVersion: '1.0.0', name: 'n', type: 'router', ...extra });

describe('prevResultOf', () => {
  it('parses the prevResult as the config version', () => {
    const r = prevResultOf(
      conf({ prevResult: { interfaces: [{ name: 'eth0', sandbox: '/x' }], ips: [{ address: '10.1.0.5/24', interface: 0 }] } }),
    );
    expect(r).toEqual({
      cniVersion: '1.0.0',
      interfaces: [{ name: 'eth0', sandbox: '/x' }],
      ips: [{ address: '10.1.0.5/24', interface: 0 }],
    });
  });

  it.each([undefined, null])('is code 7 when the prevResult is %s', (prevResult) => {
    expect(() => prevResultOf(conf({ prevResult }))).toThrow(expect.objectContaining({ code: 7, msg: 'required prevResult missing' }));
  });

  it.each([
    ['a string', 'x', 'invalid prevResult'],
    ['ips not an array', { ips: {} }, 'invalid prevResult.ips'],
    ['a bad address', { ips: [{ address: '10.1.0.500/24' }] }, 'invalid prevResult.ips[0].address'],
  ])('is code 7 when the prevResult is %s', (_label, prevResult, msg) => {
    expect(() => prevResultOf(conf({ prevResult }))).toThrow(expect.objectContaining({ code: 7, msg }));
  });

  it('optionalPrevResultOf returns undefined when absent (DEL)', () => {
    expect(optionalPrevResultOf(conf({}))).toBeUndefined();
    expect(optionalPrevResultOf(conf({ prevResult: {} }))).toEqual({ cniVersion: '1.0.0' });
    expect(() => optionalPrevResultOf(conf({ prevResult: { ips: 1 } }))).toThrow(expect.objectContaining({ code: 7 }));
  });
});
