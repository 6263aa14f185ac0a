/**
 * The CNI_* environment: which variables each verb needs, and their syntax.
 *
 * Runtimes built on libcni set all six variables for every verb and pass ""
 * for the ones a verb does not use (GC and STATUS get no container), so an
 * empty value counts as absent everywhere here.
 */
import { CniCode, CniError } from '../errors';
import { COMMANDS, type CniCommand } from './version';

/** CNI_ARGS parsed into a map, in the order given; IgnoreUnknown is kept as a key. */
export type CniArgs = Record<string, string>;

/** The validated environment of one plugin invocation; absent variables are "" (or [] for the path). */
export interface CniEnv {
  command: CniCommand;
  /** "" for GC and STATUS. */
  containerId: string;
  /** "" when absent (DEL after the netns is gone, GC, STATUS). */
  netns: string;
  /** "" for GC and STATUS. */
  ifName: string;
  /** CNI_ARGS parsed; use knownCniArgs() to pick keys with IgnoreUnknown semantics. */
  args: CniArgs;
  /** CNI_PATH split on ":". */
  path: string[];
}

/** Anything shaped like process.env. */
export type EnvSource = Readonly<Record<string, string | undefined>>;

export const CONTAINER_ID_RE = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

/** Linux IFNAMSIZ (16) minus the terminating NUL. */
export const MAX_IFNAME_BYTES = 15;

/** The variables each verb cannot do without (CNI_PATH for ADD and CHECK as in skel, so delegation works). */
const REQUIRED: Record<CniCommand, readonly string[]> = {
  ADD: ['CNI_COMMAND', 'CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
  CHECK: ['CNI_COMMAND', 'CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
  // The netns may already be gone when DEL runs: it must still succeed.
  DEL: ['CNI_COMMAND', 'CNI_CONTAINERID', 'CNI_IFNAME'],
  GC: ['CNI_COMMAND', 'CNI_PATH'],
  STATUS: ['CNI_COMMAND', 'CNI_PATH'],
  VERSION: ['CNI_COMMAND'],
};

export function requiredEnv(command: CniCommand): readonly string[] {
  return REQUIRED[command];
}

/** Reads CNI_COMMAND: code 4 when absent or not one of the spec's verbs. */
export function parseCommand(env: EnvSource): CniCommand {
  const raw = env.CNI_COMMAND ?? '';
  if (raw === '') {
    throw new CniError(
      CniCode.InvalidEnvironment,
      'required env variables [CNI_COMMAND] missing',
      `expected one of ${COMMANDS.join(', ')}`,
    );
  }
  if (!(COMMANDS as readonly string[]).includes(raw)) {
    throw new CniError(
      CniCode.InvalidEnvironment,
      `unknown CNI_COMMAND: ${raw}`,
      `expected one of ${COMMANDS.join(', ')}, got ${JSON.stringify(raw)}`,
    );
  }
  return raw as CniCommand;
}

/**
 * Validates the environment for its CNI_COMMAND: every missing variable is
 * named in one error (code 4); container ID and interface name are checked
 * for the verbs that act on a container.
 */
export function parseEnv(env: EnvSource): CniEnv {
  const command = parseCommand(env);
  const missing = REQUIRED[command].filter((name) => (env[name] ?? '') === '');
  if (missing.length > 0) {
    throw new CniError(
      CniCode.InvalidEnvironment,
      `required env variables [${missing.join(',')}] missing`,
      `CNI_COMMAND=${command} needs ${REQUIRED[command].join(', ')} (an empty value counts as missing)`,
    );
  }
  const containerId = env.CNI_CONTAINERID ?? '';
  const ifName = env.CNI_IFNAME ?? '';
  if (command === 'ADD' || command === 'DEL' || command === 'CHECK') {
    validateContainerId(containerId);
    validateIfName(ifName);
  }
  return {
    command,
    containerId,
    netns: env.CNI_NETNS ?? '',
    ifName,
    args: parseCniArgs(env.CNI_ARGS ?? ''),
    path: splitCniPath(env.CNI_PATH ?? ''),
  };
}

/** Code 4 unless the ID matches the spec's pattern (it ends up in file names and aliases). */
export function validateContainerId(id: string): void {
  if (id === '') {
    throw new CniError(CniCode.InvalidEnvironment, 'missing CNI_CONTAINERID', 'expected a non-empty container ID');
  }
  if (!CONTAINER_ID_RE.test(id)) {
    throw new CniError(
      CniCode.InvalidEnvironment,
      'invalid characters in CNI_CONTAINERID',
      `expected ${CONTAINER_ID_RE.source}, got ${JSON.stringify(id)}`,
    );
  }
}

/** Code 4 unless the kernel would accept the name: 1-15 bytes, not "." or "..", no "/", ":" or whitespace. */
export function validateIfName(name: string): void {
  const fail = (why: string): never => {
    throw new CniError(
      CniCode.InvalidEnvironment,
      `invalid CNI_IFNAME: ${why}`,
      `expected 1-${MAX_IFNAME_BYTES} bytes without "/", ":" or whitespace, got ${JSON.stringify(name)}`,
    );
  };
  if (name === '') fail('interface name is empty');
  if (Buffer.byteLength(name) > MAX_IFNAME_BYTES) fail('interface name is too long');
  if (name === '.' || name === '..') fail('interface name is . or ..');
  if (/[/:\s]/u.test(name)) fail('interface name contains / or : or whitespace characters');
}

/** CNI_PATH is ":"-separated like $PATH; empty entries are dropped. */
export function splitCniPath(raw: string): string[] {
  return raw.split(':').filter((dir) => dir !== '');
}

/**
 * Parses CNI_ARGS ("K=V;K=V"). The value is everything after the first "=",
 * a repeated key keeps its last value, empty segments (a trailing ";") are
 * skipped. A segment without "=" or with an empty key is code 4.
 */
export function parseCniArgs(raw: string): CniArgs {
  const args: CniArgs = {};
  if (raw === '') return args;
  for (const pair of raw.split(';')) {
    if (pair === '') continue;
    const eq = pair.indexOf('=');
    if (eq <= 0) {
      throw new CniError(
        CniCode.InvalidEnvironment,
        'invalid CNI_ARGS',
        `expected "KEY=VALUE" pairs separated by ";", got pair ${JSON.stringify(pair)} in ${JSON.stringify(raw)}`,
      );
    }
    args[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return args;
}

/** The inverse of parseCniArgs, used to pass CNI_ARGS on to a delegate. */
export function formatCniArgs(args: CniArgs): string {
  return Object.entries(args)
    .map(([k, v]) => `${k}=${v}`)
    .join(';');
}

/** True when CNI_ARGS holds IgnoreUnknown=1 (or "true", any case); code 4 for any other value but 0/false. */
export function ignoresUnknownArgs(args: CniArgs): boolean {
  const v = args.IgnoreUnknown;
  if (v === undefined) return false;
  const lower = v.toLowerCase();
  if (lower === '1' || lower === 'true') return true;
  if (lower === '0' || lower === 'false') return false;
  throw new CniError(
    CniCode.InvalidEnvironment,
    'invalid CNI_ARGS',
    `expected IgnoreUnknown to be 1, 0, true or false, got ${JSON.stringify(v)}`,
  );
}

/**
 * Picks the keys a plugin understands out of CNI_ARGS. Any other key is an
 * error (code 2, naming key and value) unless the runtime set IgnoreUnknown,
 * which Kubernetes runtimes do because they send the pod's K8S_* keys to
 * every plugin of the chain.
 */
export function knownCniArgs<K extends string>(args: CniArgs, known: readonly K[]): Partial<Record<K, string>> {
  const ignore = ignoresUnknownArgs(args);
  const picked: Partial<Record<K, string>> = {};
  for (const [key, value] of Object.entries(args)) {
    if ((known as readonly string[]).includes(key)) {
      picked[key as K] = value;
    } else if (key !== 'IgnoreUnknown' && !ignore) {
      throw new CniError(
        CniCode.UnsupportedField,
        `unknown CNI_ARGS key ${JSON.stringify(key)}`,
        `got ${key}=${JSON.stringify(value)}; expected one of ${JSON.stringify(known)}, or IgnoreUnknown=1 to skip unknown keys`,
      );
    }
  }
  return picked;
}
