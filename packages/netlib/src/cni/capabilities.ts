/**
 * Capability args: what a runtime injects under `runtimeConfig` for the
 * capabilities a plugin declares in its config (CONVENTIONS.md), plus the
 * de facto `io.kubernetes.cri.pod-annotations` CRI-O sends.
 *
 * runtimeConfigOf() checks the shape of the keys it knows and leaves the rest
 * alone, so a plugin reads typed values without repeating the checks.
 */
import { ConfigError } from '../errors';
import { isValidCidr, isValidIp } from '../ip/parse';
import type { NetConf } from './conf';

export interface PortMapping {
  hostPort: number;
  containerPort: number;
  /** "tcp", "udp" or "sctp" (any case). */
  protocol: string;
  hostIP?: string;
}

export interface IpRange {
  subnet: string;
  rangeStart?: string;
  rangeEnd?: string;
  gateway?: string;
}

/** Rates in bits per second, bursts in bits. */
export interface BandwidthLimits {
  ingressRate?: number;
  ingressBurst?: number;
  egressRate?: number;
  egressBurst?: number;
}

export interface DnsCapability {
  servers?: string[];
  searches?: string[];
  options?: string[];
}

export interface RuntimeConfig {
  portMappings?: PortMapping[];
  /** One inner array per range set, as in host-local's `ranges`. */
  ipRanges?: IpRange[][];
  bandwidth?: BandwidthLimits;
  dns?: DnsCapability;
  /** Requested addresses, bare or in CIDR form. */
  ips?: string[];
  mac?: string;
  infinibandGUID?: string;
  deviceID?: string;
  cgroupPath?: string;
  aliases?: string[];
  'io.kubernetes.cri.pod-annotations'?: Record<string, string>;
  [key: string]: unknown;
}

const MAC_RE = /^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$/;
const PROTOCOLS = ['tcp', 'udp', 'sctp'];

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The config's runtimeConfig ({} when absent), with every known capability checked; ConfigError (code 7) names the field. */
export function runtimeConfigOf(conf: NetConf): RuntimeConfig {
  const rc: unknown = conf.runtimeConfig;
  if (rc === undefined || rc === null) return {};
  if (!isObject(rc)) throw new ConfigError('runtimeConfig', 'an object', rc);
  const f = (path: string): string => `runtimeConfig.${path}`;

  const array = (v: unknown, path: string): unknown[] => {
    if (!Array.isArray(v)) throw new ConfigError(f(path), 'an array', v);
    return v;
  };
  const strings = (v: unknown, path: string): void => {
    array(v, path).forEach((s, i) => {
      if (typeof s !== 'string') throw new ConfigError(f(`${path}[${i}]`), 'a string', s);
    });
  };
  const string = (v: unknown, path: string): void => {
    if (typeof v !== 'string') throw new ConfigError(f(path), 'a string', v);
  };
  const optionalIp = (v: unknown, path: string): void => {
    if (v !== undefined && !isValidIp(v)) throw new ConfigError(f(path), 'an IP address', v);
  };

  if (rc.portMappings !== undefined) {
    array(rc.portMappings, 'portMappings').forEach((pm, i) => {
      const p = `portMappings[${i}]`;
      if (!isObject(pm)) throw new ConfigError(f(p), 'an object {hostPort, containerPort, protocol, hostIP?}', pm);
      for (const key of ['hostPort', 'containerPort'] as const) {
        const port = pm[key];
        if (!Number.isInteger(port) || (port as number) < 1 || (port as number) > 65535)
          throw new ConfigError(f(`${p}.${key}`), 'a port number 1-65535', port);
      }
      if (typeof pm.protocol !== 'string' || !PROTOCOLS.includes(pm.protocol.toLowerCase())) {
        throw new ConfigError(f(`${p}.protocol`), `one of ${PROTOCOLS.join(', ')}`, pm.protocol);
      }
      // Runtimes send "" for "all host addresses".
      if (pm.hostIP !== '') optionalIp(pm.hostIP, `${p}.hostIP`);
    });
  }
  if (rc.ipRanges !== undefined) {
    array(rc.ipRanges, 'ipRanges').forEach((set, i) => {
      array(set, `ipRanges[${i}]`).forEach((r, j) => {
        const p = `ipRanges[${i}][${j}]`;
        if (!isObject(r)) throw new ConfigError(f(p), 'an object {subnet, rangeStart?, rangeEnd?, gateway?}', r);
        if (!isValidCidr(r.subnet)) throw new ConfigError(f(`${p}.subnet`), 'a CIDR like "10.1.0.0/24"', r.subnet);
        optionalIp(r.rangeStart, `${p}.rangeStart`);
        optionalIp(r.rangeEnd, `${p}.rangeEnd`);
        optionalIp(r.gateway, `${p}.gateway`);
      });
    });
  }
  if (rc.bandwidth !== undefined) {
    const bw = rc.bandwidth;
    if (!isObject(bw)) throw new ConfigError(f('bandwidth'), 'an object {ingressRate, ingressBurst, egressRate, egressBurst}', bw);
    for (const key of ['ingressRate', 'ingressBurst', 'egressRate', 'egressBurst'] as const) {
      const v = bw[key];
      if (v !== undefined && !(Number.isSafeInteger(v) && (v as number) >= 0)) {
        throw new ConfigError(f(`bandwidth.${key}`), `a non-negative integer (${key.endsWith('Rate') ? 'bits per second' : 'bits'})`, v);
      }
    }
  }
  if (rc.dns !== undefined) {
    const dns = rc.dns;
    if (!isObject(dns)) throw new ConfigError(f('dns'), 'an object {servers, searches, options}', dns);
    for (const key of ['servers', 'searches', 'options'] as const) if (dns[key] !== undefined) strings(dns[key], `dns.${key}`);
  }
  if (rc.ips !== undefined) {
    array(rc.ips, 'ips').forEach((ip, i) => {
      if (!isValidIp(ip) && !isValidCidr(ip)) throw new ConfigError(f(`ips[${i}]`), 'an IP address, bare or in CIDR form', ip);
    });
  }
  if (rc.mac !== undefined && !(typeof rc.mac === 'string' && MAC_RE.test(rc.mac))) {
    throw new ConfigError(f('mac'), 'a MAC address like "c2:11:22:33:44:55"', rc.mac);
  }
  for (const key of ['infinibandGUID', 'deviceID', 'cgroupPath'] as const) if (rc[key] !== undefined) string(rc[key], key);
  if (rc.aliases !== undefined) strings(rc.aliases, 'aliases');
  const annotations = rc['io.kubernetes.cri.pod-annotations'];
  if (annotations !== undefined) {
    const key = 'io.kubernetes.cri.pod-annotations';
    if (!isObject(annotations)) throw new ConfigError(f(key), 'an object of strings', annotations);
    for (const [k, v] of Object.entries(annotations)) if (typeof v !== 'string') throw new ConfigError(f(`${key}.${k}`), 'a string', v);
  }
  return rc as RuntimeConfig;
}
