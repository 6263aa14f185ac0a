/**
 * The veth plugin's configuration: the meta-plugin fields shared with router,
 * plus ip_conflict and mac_prefix. Parsed once per call; every bad value is a
 * code-7 error naming the field, the expected form and the value received.
 */
import { ConfigError, prevResultOf, type NetConf, type Result } from '@cnikit/netlib';
import {
  isObject,
  lenient,
  parseBool,
  parseInteger,
  parseMetaConfig,
  rejectUnknown,
  type ConfigWarnings,
  type MetaConfig,
} from '@cnikit/meta';

export interface IpConflict {
  enabled: boolean;
  /** Wait between probes, in milliseconds. */
  intervalMs: number;
  retries: number;
}

export interface VethConfig extends MetaConfig {
  netName: string;
  cniVersion: string;
  ipConflict: IpConflict;
  /** Two hex octets ("0a:1b"); the chained interface's MAC becomes prefix + the four octets of its IPv4. */
  macPrefix?: string;
  /** The previous plugin's result; undefined only where the verb allows it (DEL, GC, STATUS). */
  prevResult?: Result;
}

/** Go-style durations as spidernet-io's veth takes them: "500ms", "1s", "1.5s", "2m". */
export function parseDuration(field: string, v: unknown): number {
  const m = typeof v === 'string' ? /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(v) : null;
  if (!m) throw new ConfigError(field, 'a duration such as "500ms", "1s" or "2m"', v);
  const n = Number(m[1]);
  const ms = m[2] === 'ms' ? n : m[2] === 's' ? n * 1000 : n * 60_000;
  if (ms <= 0 || ms > 60_000) throw new ConfigError(field, 'a duration above 0 and at most 1m', v);
  return ms;
}

function parseIpConflict(raw: Record<string, unknown>): IpConflict {
  const v = raw['ip_conflict'];
  if (v === undefined) return { enabled: false, intervalMs: 1000, retries: 3 };
  if (!isObject(v)) throw new ConfigError('ip_conflict', 'an object', v);
  rejectUnknown(v, ['enabled', 'interval', 'retries'], 'ip_conflict.');
  return {
    enabled: parseBool(v, 'enabled', false, 'ip_conflict.enabled'),
    intervalMs: v['interval'] === undefined ? 1000 : parseDuration('ip_conflict.interval', v['interval']),
    retries: parseInteger(v, 'retries', 3, 1, 100, 'ip_conflict.retries'),
  };
}

function parseMacPrefix(raw: Record<string, unknown>): string | undefined {
  const v = raw['mac_prefix'];
  if (v === undefined || v === '') return undefined;
  if (typeof v !== 'string' || !/^[0-9a-fA-F]{2}:[0-9a-fA-F]{2}$/.test(v)) {
    throw new ConfigError('mac_prefix', 'two hex octets such as "0a:1b"', v);
  }
  const first = parseInt(v.slice(0, 2), 16);
  // Bit 0 of the first octet marks multicast: such a MAC cannot be an interface address.
  if (first & 1) throw new ConfigError('mac_prefix', 'a unicast prefix (first octet even)', v);
  return v.toLowerCase();
}

/**
 * Parses the plugin config. `needPrev` is true for ADD and CHECK, whose
 * prevResult (the chained interface's result) is required. With `warnings`
 * (DEL), bad fields are recorded there and left at their defaults (see
 * ConfigWarnings): DEL finds its objects by container ID and interface alone.
 */
export function parseConfig(conf: NetConf, needPrev: boolean, warnings?: ConfigWarnings): VethConfig {
  const raw = conf as unknown as Record<string, unknown>;
  const meta = parseMetaConfig(raw, 'veth', warnings);
  const cfg: VethConfig = {
    ...meta,
    netName: conf.name,
    cniVersion: conf.cniVersion,
    ipConflict: lenient(
      warnings,
      () => parseIpConflict(raw),
      () => parseIpConflict({}),
    ),
  };
  const macPrefix = lenient(
    warnings,
    () => parseMacPrefix(raw),
    () => undefined,
  );
  if (macPrefix !== undefined) cfg.macPrefix = macPrefix;
  if (needPrev) cfg.prevResult = prevResultOf(conf);
  else if (conf.prevResult !== undefined && conf.prevResult !== null) {
    const prev = lenient(
      warnings,
      () => prevResultOf(conf),
      () => undefined,
    );
    if (prev) cfg.prevResult = prev;
  }
  return cfg;
}
