/**
 * Config fields shared by the veth and router meta-plugins (seed 001), parsed
 * once and validated strictly: a wrong value is an error that names the field,
 * the expected form and the value received. spidernet-io/cni-plugins silently replaced bad
 * values with defaults; we never do.
 */
import { CniError, ConfigError, ip } from '@cnikit/netlib';

/**
 * Where a lenient parse (DEL) records the fields it could not use. DEL must succeed whenever what it needs
 * to find its objects (container ID, interface, aliases) is there: libcni deletes a chain in reverse and
 * stops at the first error, so a DEL that failed on a field ADD had already rejected would keep the chained
 * plugins (macvlan, host-local) from ever freeing the pod's NIC and lease, and kubelet would retry forever.
 * ADD, CHECK, GC and STATUS parse strictly (no warnings list): a bad field is their error.
 */
export type ConfigWarnings = string[];

/**
 * `parse()`, or, when it fails on a bad field and `warnings` is given, `fallback()` with the error recorded
 * in `warnings`. Errors other than bad config (CniError codes 2 and 7) always propagate.
 */
export function lenient<T>(warnings: ConfigWarnings | undefined, parse: () => T, fallback: () => T): T {
  try {
    return parse();
  } catch (e) {
    const badConfig = e instanceof CniError && (e.code === 2 || e.code === 7); // ConfigError is code 7
    if (!warnings || !badConfig) throw e;
    warnings.push(e.details && !e.message.includes(e.details) ? `${e.message}: ${e.details}` : e.message);
    return fallback();
  }
}

export interface RpFilter {
  /** Also set rp_filter on the host side (net.ipv4.conf.all and the host veth). */
  setHost: boolean;
  /** 0 off, 1 strict, 2 loose. */
  value: 0 | 1 | 2;
}

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface LogOptions {
  level: LogLevel;
  file: string;
  /** Rotate when the file passes this many MiB. */
  maxSizeMiB: number;
  /** Delete rotated files older than this many days. */
  maxAgeDays: number;
  /** Keep at most this many rotated files. */
  maxCount: number;
}

/** -1: migrate when the interface is not the pod's first; 0: never; 1: always. */
export type MigrateRoute = -1 | 0 | 1;

export interface MetaConfig {
  overlayHijackSubnet: string[];
  serviceHijackSubnet: string[];
  additionalHijackSubnet: string[];
  migrateRoute: MigrateRoute;
  skipCall: boolean;
  rpFilter: RpFilter;
  logOptions: LogOptions;
}

type Raw = Record<string, unknown>;

export function isObject(v: unknown): v is Raw {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A list of CIDRs; each must parse and must be the network address (10.0.0.0/8, not 10.1.2.3/8). */
export function parseCidrList(raw: Raw, field: string, required: boolean): string[] {
  const v = raw[field];
  if (v === undefined || v === null) {
    if (required) throw new ConfigError(field, 'a non-empty list of CIDRs such as ["10.244.0.0/18"]', v);
    return [];
  }
  if (!Array.isArray(v)) throw new ConfigError(field, 'a list of CIDRs such as ["10.244.0.0/18"]', v);
  if (required && v.length === 0) throw new ConfigError(field, 'a non-empty list of CIDRs', v);
  return v.map((item, i) => {
    if (typeof item !== 'string' || !ip.isValidCidr(item)) {
      throw new ConfigError(`${field}[${i}]`, 'a CIDR such as "10.244.0.0/18" or "fd00:10::/64"', item);
    }
    if (ip.hasHostBits(item)) {
      throw new ConfigError(`${field}[${i}]`, `a network address (${ip.networkOf(item)})`, item);
    }
    return ip.canonicalCidr(item);
  });
}

/** `name` is the field's full path for messages (e.g. "rp_filter.set_host"); defaults to `field`. */
export function parseBool(raw: Raw, field: string, dflt: boolean, name = field): boolean {
  const v = raw[field];
  if (v === undefined) return dflt;
  if (typeof v !== 'boolean') throw new ConfigError(name, 'true or false', v);
  return v;
}

export function parseInteger(raw: Raw, field: string, dflt: number, min: number, max: number, name = field): number {
  const v = raw[field];
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new ConfigError(name, `an integer from ${min} to ${max}`, v);
  }
  return v;
}

function parseObject(raw: Raw, field: string): Raw {
  const v = raw[field];
  if (v === undefined) return {};
  if (!isObject(v)) throw new ConfigError(field, 'an object', v);
  return v;
}

/** Rejects keys we do not know, so a typo does not silently fall back to a default. */
export function rejectUnknown(obj: Raw, known: readonly string[], where: string): void {
  for (const k of Object.keys(obj)) {
    if (!known.includes(k)) throw new ConfigError(`${where}${k}`, `one of ${known.join(', ')}`, obj[k]);
  }
}

function parseRpFilter(raw: Raw): RpFilter {
  const o = parseObject(raw, 'rp_filter');
  rejectUnknown(o, ['set_host', 'value'], 'rp_filter.');
  return {
    setHost: parseBool(o, 'set_host', true, 'rp_filter.set_host'),
    value: parseInteger(o, 'value', 2, 0, 2, 'rp_filter.value') as 0 | 1 | 2,
  };
}

const LEVELS: readonly LogLevel[] = ['debug', 'info', 'warn', 'error'];

function parseLogOptions(raw: Raw, plugin: string): LogOptions {
  const o = parseObject(raw, 'log_options');
  rejectUnknown(o, ['log_level', 'log_file', 'log_max_size', 'log_max_age', 'log_max_count'], 'log_options.');
  let level: LogLevel = 'debug';
  if (o['log_level'] !== undefined) {
    const l = typeof o['log_level'] === 'string' ? o['log_level'].toLowerCase() : o['log_level'];
    if (typeof l !== 'string' || !LEVELS.includes(l as LogLevel)) {
      throw new ConfigError('log_options.log_level', `one of ${LEVELS.join(', ')}`, o['log_level']);
    }
    level = l as LogLevel;
  }
  let file = `/var/log/meta-plugins/${plugin}.log`;
  if (o['log_file'] !== undefined) {
    if (typeof o['log_file'] !== 'string' || !o['log_file'].startsWith('/')) {
      throw new ConfigError('log_options.log_file', 'an absolute file path', o['log_file']);
    }
    file = o['log_file'];
  }
  const num = (k: string, d: number, max: number): number => parseInteger(o, k, d, 1, max, `log_options.${k}`);
  return {
    level,
    file,
    maxSizeMiB: num('log_max_size', 100, 100_000),
    maxAgeDays: num('log_max_age', 5, 3650),
    maxCount: num('log_max_count', 10, 1000),
  };
}

function parseMigrateRoute(raw: Raw): MigrateRoute {
  const migrate = raw['migrate_route'];
  if (migrate !== undefined && migrate !== -1 && migrate !== 0 && migrate !== 1) {
    throw new ConfigError('migrate_route', '-1 (auto), 0 (never) or 1 (always)', migrate);
  }
  return (migrate ?? -1) as MigrateRoute;
}

/**
 * Parses the fields every meta-plugin has. `plugin` names the default log file. With `warnings` (DEL), a bad
 * field is recorded there and its default (an empty list for the hijacked subnets) used instead.
 */
export function parseMetaConfig(raw: Raw, plugin: string, warnings?: ConfigWarnings): MetaConfig {
  const field = <T>(parse: () => T, fallback: () => T): T => lenient(warnings, parse, fallback);
  return {
    overlayHijackSubnet: field(
      () => parseCidrList(raw, 'overlay_hijack_subnet', true),
      () => [],
    ),
    serviceHijackSubnet: field(
      () => parseCidrList(raw, 'service_hijack_subnet', true),
      () => [],
    ),
    additionalHijackSubnet: field(
      () => parseCidrList(raw, 'additional_hijack_subnet', false),
      () => [],
    ),
    migrateRoute: field(
      () => parseMigrateRoute(raw),
      () => -1,
    ),
    skipCall: field(
      () => parseBool(raw, 'skip_call', false),
      () => false,
    ),
    rpFilter: field(
      () => parseRpFilter(raw),
      () => parseRpFilter({}),
    ),
    logOptions: field(
      () => parseLogOptions(raw, plugin),
      () => parseLogOptions({}, plugin),
    ),
  };
}

/** The fields parseMetaConfig knows, for plugins that reject unknown top-level fields. */
export const META_FIELDS = [
  'overlay_hijack_subnet',
  'service_hijack_subnet',
  'additional_hijack_subnet',
  'migrate_route',
  'skip_call',
  'rp_filter',
  'log_options',
] as const;

/** Every hijacked subnet (overlay, service, additional) in config order. */
export function hijackSubnets(c: MetaConfig): string[] {
  return [...c.overlayHijackSubnet, ...c.serviceHijackSubnet, ...c.additionalHijackSubnet];
}
