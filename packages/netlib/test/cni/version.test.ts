import { CniError } from '../../src/errors';
import {
  SUPPORTED_VERSIONS,
  assertVersionAllows,
  assertVersionSupported,
  compareVersions,
  highestVersion,
  isSupportedVersion,
  parseVersion,
  versionAllows,
  type CniCommand,
} from '../../src/cni/version';

describe('versions', () => {
  it('supports 0.3.0 to 1.1.0', () => {
    expect(SUPPORTED_VERSIONS).toEqual(['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0']);
    expect(isSupportedVersion('0.2.0')).toBe(false);
    expect(isSupportedVersion('1.2.0')).toBe(false);
    expect(isSupportedVersion(1)).toBe(false);
  });

  it.each([
    ['0.3.0', '0.3.1', -1],
    ['0.4.0', '0.4.0', 0],
    ['1.0.0', '0.4.0', 1],
    ['1.10.0', '1.9.0', 1],
    ['0.10.0', '1.0.0', -1],
  ])('compares %s with %s', (a, b, sign) => {
    expect(Math.sign(compareVersions(a, b))).toBe(sign);
  });

  it.each(['', '1', '1.0', 'v1.0.0', '1.0.0-rc1', '01.0.0', '1.0.0 ', '1.0.0.0', '1..0', '1.0.', '.1.0', '1.+0.0', '1.0.00'])(
    'rejects %j with code 1',
    (v) => {
      expect(() => parseVersion(v)).toThrow(CniError);
      try {
        parseVersion(v);
      } catch (e) {
        expect((e as CniError).code).toBe(1);
      }
    },
  );

  it('finds the highest version of a list', () => {
    expect(highestVersion(['0.4.0', '1.0.0', '0.3.1'])).toBe('1.0.0');
  });

  const table: [CniCommand, string, boolean][] = [];
  for (const v of SUPPORTED_VERSIONS) {
    table.push(['ADD', v, true], ['DEL', v, true], ['VERSION', v, true]);
    table.push(['CHECK', v, compareVersions(v, '0.4.0') >= 0]);
    table.push(['GC', v, v === '1.1.0'], ['STATUS', v, v === '1.1.0']);
  }
  it.each(table)('%s on %s allowed: %s', (command, version, allowed) => {
    expect(versionAllows(command, version)).toBe(allowed);
    if (allowed) {
      expect(() => assertVersionAllows(command, version)).not.toThrow();
    } else {
      expect(() => assertVersionAllows(command, version)).toThrow(
        expect.objectContaining({ code: 1, msg: `config version does not allow ${command}` }),
      );
    }
  });

  it('assertVersionSupported names both sides', () => {
    expect(() => assertVersionSupported('0.2.0', ['1.0.0', '1.1.0'])).toThrow(
      expect.objectContaining({
        code: 1,
        msg: 'incompatible CNI versions',
        details: 'config is "0.2.0", plugin supports ["1.0.0","1.1.0"]',
      }),
    );
  });
});
