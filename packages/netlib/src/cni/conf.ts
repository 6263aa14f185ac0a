/**
 * The network configuration a plugin reads on stdin.
 *
 * parseNetConf() checks only what every plugin needs (JSON, cniVersion, name,
 * type and the shape of the well-known optional keys) and returns the raw
 * object: each plugin's own parseConfig() extends NetConf and validates its
 * fields once, naming the field, the expected form and the value received.
 */
import { CniCode, CniError, ConfigError } from '../errors';
import type { RuntimeConfig } from './capabilities';
import { SUPPORTED_VERSIONS, assertVersionSupported } from './version';

/** One live attachment listed by the runtime for GC. */
export interface Attachment {
  containerID: string;
  ifname: string;
}

export interface IpamConf {
  /** Name of the IPAM plugin binary, looked up in CNI_PATH. */
  type: string;
  [key: string]: unknown;
}

export interface DnsConf {
  nameservers?: string[];
  domain?: string;
  search?: string[];
  options?: string[];
}

export interface NetConf {
  cniVersion: string;
  name: string;
  type: string;
  capabilities?: Record<string, boolean>;
  /** Capability args the runtime injected (capabilities ∩ what it was asked for). */
  runtimeConfig?: RuntimeConfig;
  /** Raw; read it through prevResultOf(). */
  prevResult?: unknown;
  /** Absent when the config has none or `"ipam": {}` ("no IPAM"); when present, `type` is set. */
  ipam?: IpamConf;
  dns?: DnsConf;
  args?: Record<string, unknown>;
  'cni.dev/valid-attachments'?: Attachment[];
  /** Legacy name still sent by libcni next to valid-attachments. */
  'cni.dev/attachments'?: Attachment[];
  [key: string]: unknown;
}

/** The spec's network-name rule, which skel enforces before calling the plugin. */
export const NETWORK_NAME_RE = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isStringArray = (v: unknown): v is string[] => Array.isArray(v) && v.every((s) => typeof s === 'string');

export interface ParseNetConfOptions {
  /** Versions the plugin accepts; default every version netlib supports. */
  versions?: readonly string[];
}

/**
 * Parses stdin into a NetConf. Not JSON or not an object: code 6. Missing or
 * malformed cniVersion/name/type or well-known keys: code 7. A cniVersion the
 * plugin does not support: code 1, with the supported versions in details.
 */
export function parseNetConf(stdin: Buffer | string, opts: ParseNetConfOptions = {}): NetConf {
  return validateNetConf(decodeJson(stdin), opts);
}

/** JSON.parse with the spec's code 6 on failure. */
export function decodeJson(stdin: Buffer | string, what = 'network config'): unknown {
  try {
    return JSON.parse(stdin.toString());
  } catch (err) {
    throw new CniError(CniCode.DecodeFailure, `failed to decode ${what}`, (err as Error).message, { cause: err });
  }
}

/** The checks of parseNetConf on an already decoded value (the dispatcher decodes once). */
export function validateNetConf(raw: unknown, opts: ParseNetConfOptions = {}): NetConf {
  if (!isObject(raw)) {
    throw new CniError(
      CniCode.DecodeFailure,
      'failed to decode network config',
      `expected a JSON object, got ${String(JSON.stringify(raw)).slice(0, 80)}`,
    );
  }

  const { cniVersion, name, type } = raw;
  if (typeof cniVersion !== 'string' || cniVersion === '') throw new ConfigError('cniVersion', 'a version string like "1.1.0"', cniVersion);
  assertVersionSupported(cniVersion, opts.versions ?? SUPPORTED_VERSIONS);
  if (typeof name !== 'string' || name === '') throw new ConfigError('name', 'a non-empty network name', name);
  if (!NETWORK_NAME_RE.test(name)) throw new ConfigError('name', `a network name matching ${NETWORK_NAME_RE.source}`, name);
  if (typeof type !== 'string' || type === '') throw new ConfigError('type', 'the plugin type, a non-empty string', type);

  if (raw.ipam !== undefined) {
    if (!isObject(raw.ipam)) throw new ConfigError('ipam', 'an object like {"type": "host-local", ...}', raw.ipam);
    if (Object.keys(raw.ipam).length === 0) {
      // `"ipam": {}` is the usual way to say "no IPAM" (an L2-only bridge);
      // dropping it keeps the type honest: an ipam present always has a type.
      delete raw.ipam;
    } else if (typeof raw.ipam.type !== 'string' || raw.ipam.type === '') {
      throw new ConfigError('ipam.type', 'the IPAM plugin name, a non-empty string', raw.ipam.type);
    }
  }
  if (
    raw.capabilities !== undefined &&
    !(isObject(raw.capabilities) && Object.values(raw.capabilities).every((v) => typeof v === 'boolean'))
  ) {
    throw new ConfigError('capabilities', 'an object of booleans like {"portMappings": true}', raw.capabilities);
  }
  if (raw.runtimeConfig !== undefined && !isObject(raw.runtimeConfig))
    throw new ConfigError('runtimeConfig', 'an object', raw.runtimeConfig);
  if (raw.args !== undefined && !isObject(raw.args)) throw new ConfigError('args', 'an object', raw.args);
  if (raw.dns !== undefined) {
    const dns = raw.dns;
    if (!isObject(dns)) throw new ConfigError('dns', 'an object {nameservers, domain, search, options}', dns);
    for (const key of ['nameservers', 'search', 'options'] as const) {
      if (dns[key] !== undefined && !isStringArray(dns[key])) throw new ConfigError(`dns.${key}`, 'an array of strings', dns[key]);
    }
    if (dns.domain !== undefined && typeof dns.domain !== 'string') throw new ConfigError('dns.domain', 'a string', dns.domain);
  }
  return raw as NetConf;
}

/**
 * The attachments GC must keep: `cni.dev/valid-attachments`, or the legacy
 * `cni.dev/attachments` libcni also sends. A GC config with neither is code
 * 7: treating it as "nothing is valid" would delete every attachment.
 */
export function validAttachments(conf: NetConf): Attachment[] {
  const key = conf['cni.dev/valid-attachments'] !== undefined ? 'cni.dev/valid-attachments' : 'cni.dev/attachments';
  const list: unknown = conf[key];
  if (list === undefined)
    throw new ConfigError(
      'cni.dev/valid-attachments',
      'an array of {"containerID", "ifname"} (GC needs the list of live attachments)',
      undefined,
    );
  if (!Array.isArray(list)) throw new ConfigError(key, 'an array of {"containerID", "ifname"}', list);
  return list.map((a: unknown, i) => {
    if (!isObject(a) || typeof a.containerID !== 'string' || a.containerID === '' || typeof a.ifname !== 'string' || a.ifname === '') {
      throw new ConfigError(`${key}[${i}]`, 'an object {"containerID": "<id>", "ifname": "<name>"}', a);
    }
    return { containerID: a.containerID, ifname: a.ifname };
  });
}
