/**
 * Error classes shared by every netlib module and every plugin.
 *
 * A CniError carries the spec's numeric code and is printed by the CNI
 * dispatcher as {"cniVersion","code","msg","details"} on stdout. Anything
 * that is not a CniError is reported as code 999 (ErrInternal), except
 * errors marked transient, which become code 11 ("try again later").
 * Code outside netlib decides by class (instanceof / errno), never by
 * matching message strings.
 */

/** Error codes of the CNI spec 1.1.0 (0-99 reserved), plus 999 for untyped errors. */
export const CniCode = {
  IncompatibleVersion: 1,
  UnsupportedField: 2,
  UnknownContainer: 3,
  InvalidEnvironment: 4,
  IOFailure: 5,
  DecodeFailure: 6,
  InvalidNetworkConfig: 7,
  TryAgainLater: 11,
  NotAvailable: 50,
  LimitedConnectivity: 51,
  Internal: 999,
} as const;
export type CniCodeValue = (typeof CniCode)[keyof typeof CniCode] | number;

export class CniError extends Error {
  readonly code: number;
  readonly msg: string;
  readonly details: string;
  constructor(code: number, msg: string, details = '', options?: { cause?: unknown }) {
    super(details ? `${msg}: ${details}` : msg, options);
    this.name = 'CniError';
    this.code = code;
    this.msg = msg;
    this.details = details;
  }
}

/** A configuration field has a wrong value: code 7, the message names field, expected form and value. */
export class ConfigError extends CniError {
  readonly field: string;
  constructor(field: string, expected: string, received: unknown) {
    super(CniCode.InvalidNetworkConfig, `invalid config field "${field}"`, `expected ${expected}, got ${JSON.stringify(received)}`);
    this.name = 'ConfigError';
    this.field = field;
  }
}

/** The network namespace given by path or name does not exist (code 3: nothing to clean up). */
export class NetnsNotFoundError extends CniError {
  readonly path: string;
  constructor(path: string, options?: { cause?: unknown }) {
    super(CniCode.UnknownContainer, 'netns not found', path, options);
    this.name = 'NetnsNotFoundError';
    this.path = path;
  }
}

/** Marks an error as transient: the dispatcher reports it with code 11 (try again later). */
export class TransientError extends CniError {
  constructor(msg: string, details = '', options?: { cause?: unknown }) {
    super(CniCode.TryAgainLater, msg, details, options);
    this.name = 'TransientError';
  }
}

/**
 * A failed kernel operation. `op` is what we tried ("add route"), `object`
 * what we tried it on ("10.1.0.0/24 table 116"), `errno` the symbolic errno
 * ("EEXIST"). The message reads `netlink: add route 10.1.0.0/24 table 116: EEXIST`.
 */
export class NetlinkError extends Error {
  readonly op: string;
  readonly object: string;
  readonly errno: string;
  constructor(op: string, object: string, errno: string, options?: { cause?: unknown }) {
    super(`netlink: ${op} ${object}: ${errno}`, options);
    this.name = 'NetlinkError';
    this.op = op;
    this.object = object;
    this.errno = errno;
  }
}

/** A link looked up by name, index or alias is absent. */
export class LinkNotFoundError extends NetlinkError {
  constructor(object: string, options?: { cause?: unknown }) {
    super('find link', object, 'ENODEV', options);
    this.name = 'LinkNotFoundError';
  }
}

/** True when the kernel said the object already exists. */
export function isExistsError(err: unknown): boolean {
  return err instanceof NetlinkError && err.errno === 'EEXIST';
}

/** True when the kernel said the object (link, route, rule, neighbour, address) is absent. */
export function isNotFoundError(err: unknown): boolean {
  return (
    err instanceof LinkNotFoundError ||
    err instanceof NetnsNotFoundError ||
    (err instanceof NetlinkError && ['ENOENT', 'ESRCH', 'ENODEV', 'EADDRNOTAVAIL'].includes(err.errno))
  );
}

/** Awaits a kernel change whose object may be gone already (isNotFoundError): done either way. For idempotent DEL. */
export async function ignoreNotFound(p: Promise<unknown>): Promise<void> {
  try {
    await p;
  } catch (err) {
    if (!isNotFoundError(err)) throw err;
  }
}

/** Awaits a kernel change whose object may be there already (isExistsError): done either way. For a repeated ADD. */
export async function ignoreExists(p: Promise<unknown>): Promise<void> {
  try {
    await p;
  } catch (err) {
    if (!isExistsError(err)) throw err;
  }
}

/**
 * No executable named by a plugin type (ipam.type) in any CNI_PATH directory.
 * Code 7: the configuration names a plugin this node cannot run.
 */
export class PluginNotFoundError extends CniError {
  readonly plugin: string;
  readonly searched: readonly string[];
  constructor(plugin: string, searched: readonly string[]) {
    super(
      CniCode.InvalidNetworkConfig,
      `failed to find plugin ${JSON.stringify(plugin)}`,
      `expected an executable named ${JSON.stringify(plugin)} in CNI_PATH ${JSON.stringify(searched)}`,
    );
    this.name = 'PluginNotFoundError';
    this.plugin = plugin;
    this.searched = searched;
  }
}

/** A file lock was not acquired in time: transient (code 11), another call holds it. */
export class LockTimeoutError extends TransientError {
  readonly path: string;
  readonly timeoutMs: number;
  constructor(path: string, timeoutMs: number) {
    super('lock: timed out', `waited ${timeoutMs} ms for ${path}, held by another process`);
    this.name = 'LockTimeoutError';
    this.path = path;
    this.timeoutMs = timeoutMs;
  }
}
