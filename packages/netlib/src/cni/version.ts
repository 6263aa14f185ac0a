/**
 * CNI spec versions this library speaks, and which verbs each one allows.
 *
 * Versions before 0.3.0 used a different result layout (one ip4/ip6 block)
 * and are not supported: a config naming them is rejected with code 1.
 */
import { CniCode, CniError } from '../errors';
import { decimal } from '../ip/parse';

/** Every spec version netlib can parse and produce, oldest first. */
export const SUPPORTED_VERSIONS = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] as const;
export type CniVersion = (typeof SUPPORTED_VERSIONS)[number];

/** The newest spec version netlib implements. */
export const CURRENT_VERSION: CniVersion = '1.1.0';

/** CNI_COMMAND values of the spec. */
export type CniCommand = 'ADD' | 'DEL' | 'CHECK' | 'GC' | 'STATUS' | 'VERSION';
export const COMMANDS: readonly CniCommand[] = ['ADD', 'DEL', 'CHECK', 'GC', 'STATUS', 'VERSION'];

/** The first spec version that defines each verb. */
const VERB_SINCE: Record<CniCommand, string> = {
  ADD: '0.1.0',
  DEL: '0.1.0',
  VERSION: '0.1.0',
  CHECK: '0.4.0',
  GC: '1.1.0',
  STATUS: '1.1.0',
};

export function isSupportedVersion(v: unknown): v is CniVersion {
  return typeof v === 'string' && (SUPPORTED_VERSIONS as readonly string[]).includes(v);
}

/** Splits "major.minor.patch" into numbers; throws code 1 for anything else. */
export function parseVersion(v: string): [number, number, number] {
  const parts = typeof v === 'string' ? v.split('.') : [];
  const nums = parts.map((p) => decimal(p, 0, p.length, Number.MAX_SAFE_INTEGER));
  if (nums.length !== 3 || nums.includes(undefined)) {
    throw new CniError(CniCode.IncompatibleVersion, 'invalid CNI version', `expected "major.minor.patch", got ${JSON.stringify(v)}`);
  }
  return nums as [number, number, number];
}

/** Semver-style comparison of two "x.y.z" strings: negative, 0 or positive. */
export function compareVersions(a: string, b: string): number {
  const pa = parseVersion(a);
  const pb = parseVersion(b);
  for (let i = 0; i < 3; i++) {
    const d = pa[i] - pb[i];
    if (d !== 0) return d;
  }
  return 0;
}

/** True when `command` exists in spec `version` (CHECK from 0.4.0, GC and STATUS from 1.1.0). */
export function versionAllows(command: CniCommand, version: string): boolean {
  return compareVersions(version, VERB_SINCE[command]) >= 0;
}

/** Throws code 1 "config version does not allow <VERB>" when the config's version predates the verb. */
export function assertVersionAllows(command: CniCommand, version: string): void {
  if (!versionAllows(command, version)) {
    throw new CniError(
      CniCode.IncompatibleVersion,
      `config version does not allow ${command}`,
      `${command} needs cniVersion ${VERB_SINCE[command]} or later, config has ${JSON.stringify(version)}`,
    );
  }
}

/**
 * Throws code 1 "incompatible CNI versions" unless `version` is one of
 * `supported` (the plugin's list). The details name both sides, as libcni's
 * reconciler does, so the operator sees what to change.
 */
export function assertVersionSupported(version: string, supported: readonly string[] = SUPPORTED_VERSIONS): void {
  if (!supported.includes(version)) {
    throw new CniError(
      CniCode.IncompatibleVersion,
      'incompatible CNI versions',
      `config is ${JSON.stringify(version)}, plugin supports ${JSON.stringify(supported)}`,
    );
  }
}

/** The highest version of a list (used when nothing better is known, e.g. errors before the config parsed). */
export function highestVersion(versions: readonly string[]): string {
  let best = versions[0] ?? CURRENT_VERSION;
  for (const v of versions) if (compareVersions(v, best) > 0) best = v;
  return best;
}
