/**
 * CNI results: one in-memory shape (the 1.1.0 one) for every supported
 * version, converted at the edges.
 *
 * parseResult() reads a result of any supported version (a prevResult, a
 * delegate's output) into that shape and rejects malformed ones;
 * convertResult() writes it back as JSON of the version the config asked for.
 * Layout differences: 0.3.x/0.4.0 carry `ips[].version` ("4"/"6") and know
 * only name/mac/sandbox of an interface; 1.1.0 adds interface mtu, socketPath
 * and pciID and route mtu, advmss, priority, table and scope, which 1.0.0
 * readers ignore, so 1.0.0 <-> 1.1.0 only changes `cniVersion`.
 */
import { CniCode, CniError } from '../errors';
import { isValidCidr, isValidIp } from '../ip/parse';
import { SUPPORTED_VERSIONS, compareVersions, isSupportedVersion } from './version';

export interface CniInterface {
  name: string;
  mac?: string;
  /** 1.1.0 */
  mtu?: number;
  /** The netns path for container-side interfaces; absent on the host side. */
  sandbox?: string;
  /** 1.1.0: vhost-user and similar socket-backed interfaces. */
  socketPath?: string;
  /** 1.1.0: PCI address of a device plugin's device. */
  pciID?: string;
}

export interface CniIpConfig {
  /** CIDR with the host bits set: "10.1.0.5/24". */
  address: string;
  gateway?: string;
  /** Index into `interfaces`; absent in IPAM results. */
  interface?: number;
}

export interface CniRoute {
  dst: string;
  gw?: string;
  /** 1.1.0 */
  mtu?: number;
  /** 1.1.0 */
  advmss?: number;
  /** 1.1.0: metric */
  priority?: number;
  /** 1.1.0 */
  table?: number;
  /** 1.1.0: 0 global, 253 link, 254 host */
  scope?: number;
}

export interface CniDns {
  nameservers?: string[];
  domain?: string;
  search?: string[];
  options?: string[];
}

/** A result in the 1.1.0 shape; `cniVersion` says which version it came from or goes out as. */
export interface Result {
  cniVersion: string;
  interfaces?: CniInterface[];
  ips?: CniIpConfig[];
  routes?: CniRoute[];
  dns?: CniDns;
}

export interface ParseResultOptions {
  /**
   * Version to read the result as. A prevResult is read as the config's
   * cniVersion, as libcni does; without it the result's own cniVersion is used.
   */
  version?: string;
  /** Field path used in messages ("prevResult"). Default "result". */
  field?: string;
  /** Code for a malformed result. Default 7 (invalid network config). */
  code?: number;
}

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
/** Go omits empty fields but other producers write null: treat both as absent. */
const absent = (v: unknown): v is undefined | null => v === undefined || v === null;

/** Which address family a CIDR or address belongs to, as the 0.x `version` field spells it. */
export function ipVersionOf(address: string): '4' | '6' {
  return address.includes(':') ? '6' : '4';
}

/**
 * Reads a result of any supported version (object, JSON string or Buffer)
 * into the 1.1.0 shape. Invalid JSON is code 6, an unsupported version code 1,
 * anything malformed `opts.code` (7) with the offending field named.
 */
export function parseResult(raw: unknown, opts: ParseResultOptions = {}): Result {
  const field = opts.field ?? 'result';
  const code = opts.code ?? CniCode.InvalidNetworkConfig;
  const bad = (path: string, expected: string, got: unknown): never => {
    throw new CniError(code, `invalid ${path}`, `expected ${expected}, got ${describe(got)}`);
  };

  let obj = raw;
  if (typeof raw === 'string' || Buffer.isBuffer(raw)) {
    try {
      obj = JSON.parse(raw.toString());
    } catch (err) {
      throw new CniError(CniCode.DecodeFailure, `failed to decode ${field}`, (err as Error).message, { cause: err });
    }
  }
  if (!isObject(obj)) return bad(field, 'a JSON object', obj);

  const version = opts.version ?? obj.cniVersion;
  if (typeof version !== 'string') return bad(`${field}.cniVersion`, 'a version string', version);
  if (!isSupportedVersion(version)) {
    throw new CniError(
      CniCode.IncompatibleVersion,
      'incompatible CNI versions',
      `${field} is ${JSON.stringify(version)}, supported ${JSON.stringify(SUPPORTED_VERSIONS)}`,
    );
  }

  const out: Result = { cniVersion: version };

  const str = (v: unknown, path: string): string | undefined =>
    absent(v) ? undefined : typeof v === 'string' ? v : bad(path, 'a string', v);
  const uint = (v: unknown, path: string): number | undefined =>
    absent(v) ? undefined : Number.isSafeInteger(v) && (v as number) >= 0 ? (v as number) : bad(path, 'a non-negative integer', v);
  const strings = (v: unknown, path: string): string[] | undefined => {
    if (absent(v)) return undefined;
    if (!Array.isArray(v)) return bad(path, 'an array of strings', v);
    return v.map((s, i) => (typeof s === 'string' ? s : bad(`${path}[${i}]`, 'a string', s)));
  };
  const array = (v: unknown, path: string): unknown[] | undefined =>
    absent(v) ? undefined : Array.isArray(v) ? v : bad(path, 'an array', v);

  const interfaces = array(obj.interfaces, `${field}.interfaces`);
  if (interfaces) {
    out.interfaces = interfaces.map((it, i) => {
      const p = `${field}.interfaces[${i}]`;
      if (!isObject(it)) return bad(p, 'an object', it);
      if (typeof it.name !== 'string' || it.name === '') return bad(`${p}.name`, 'a non-empty string', it.name);
      return prune<CniInterface>({
        name: it.name,
        mac: str(it.mac, `${p}.mac`),
        mtu: uint(it.mtu, `${p}.mtu`),
        sandbox: str(it.sandbox, `${p}.sandbox`),
        socketPath: str(it.socketPath, `${p}.socketPath`),
        pciID: str(it.pciID, `${p}.pciID`),
      });
    });
  }

  const ips = array(obj.ips, `${field}.ips`);
  if (ips) {
    const count = out.interfaces?.length ?? 0;
    out.ips = ips.map((it, i) => {
      const p = `${field}.ips[${i}]`;
      if (!isObject(it)) return bad(p, 'an object', it);
      if (typeof it.address !== 'string' || !isValidCidr(it.address))
        return bad(`${p}.address`, 'an address in CIDR form like "10.1.0.5/24"', it.address);
      const family = ipVersionOf(it.address);
      const gateway = str(it.gateway, `${p}.gateway`);
      if (gateway !== undefined && (!isValidIp(gateway) || ipVersionOf(gateway) !== family)) {
        bad(`${p}.gateway`, `an IPv${family} address`, gateway);
      }
      // 0.x results carry the family twice; a contradiction means the producer is broken.
      if (!absent(it.version) && it.version !== family) bad(`${p}.version`, `"${family}" (the family of ${it.address})`, it.version);
      const index = uint(it.interface, `${p}.interface`);
      if (index !== undefined && index >= count) {
        bad(`${p}.interface`, `an index into interfaces (${count} entries)`, index);
      }
      return prune<CniIpConfig>({ address: it.address, gateway, interface: index });
    });
  }

  const routes = array(obj.routes, `${field}.routes`);
  if (routes) {
    out.routes = routes.map((it, i) => {
      const p = `${field}.routes[${i}]`;
      if (!isObject(it)) return bad(p, 'an object', it);
      if (typeof it.dst !== 'string' || !isValidCidr(it.dst)) return bad(`${p}.dst`, 'a CIDR like "0.0.0.0/0"', it.dst);
      const gw = str(it.gw, `${p}.gw`);
      if (gw !== undefined && !isValidIp(gw)) bad(`${p}.gw`, 'an IP address', gw);
      return prune<CniRoute>({
        dst: it.dst,
        gw,
        mtu: uint(it.mtu, `${p}.mtu`),
        advmss: uint(it.advmss, `${p}.advmss`),
        priority: uint(it.priority, `${p}.priority`),
        table: uint(it.table, `${p}.table`),
        scope: uint(it.scope, `${p}.scope`),
      });
    });
  }

  if (!absent(obj.dns)) {
    const d = obj.dns;
    if (!isObject(d)) return bad(`${field}.dns`, 'an object', d);
    const dns = prune<CniDns>({
      nameservers: strings(d.nameservers, `${field}.dns.nameservers`),
      domain: str(d.domain, `${field}.dns.domain`),
      search: strings(d.search, `${field}.dns.search`),
      options: strings(d.options, `${field}.dns.options`),
    });
    if (Object.keys(dns).length > 0) out.dns = dns;
  }
  return out;
}

/**
 * Writes a result as the JSON object of `toVersion`. 0.3.x/0.4.0 get
 * `ips[].version` from each address family and lose the interface fields
 * they do not know; routes and dns are copied whole. 1.0.0 and 1.1.0 get
 * everything: 1.0.0 readers ignore the newer fields.
 */
export function convertResult(r: Result, toVersion: string): Record<string, unknown> {
  if (!isSupportedVersion(toVersion)) {
    throw new CniError(
      CniCode.IncompatibleVersion,
      'incompatible CNI versions',
      `cannot convert a result to ${JSON.stringify(toVersion)}, supported ${JSON.stringify(SUPPORTED_VERSIONS)}`,
    );
  }
  const legacy = compareVersions(toVersion, '1.0.0') < 0;
  const out: Record<string, unknown> = { cniVersion: toVersion };
  if (r.interfaces && r.interfaces.length > 0) {
    out.interfaces = r.interfaces.map((i) => (legacy ? prune({ name: i.name, mac: i.mac, sandbox: i.sandbox }) : prune({ ...i })));
  }
  if (r.ips && r.ips.length > 0) {
    out.ips = r.ips.map((ip) =>
      legacy
        ? prune({ version: ipVersionOf(ip.address), interface: ip.interface, address: ip.address, gateway: ip.gateway })
        : prune({ interface: ip.interface, address: ip.address, gateway: ip.gateway }),
    );
  }
  if (r.routes && r.routes.length > 0) out.routes = r.routes.map((rt) => prune({ ...rt }));
  if (r.dns && Object.values(r.dns).some((v) => v !== undefined)) out.dns = prune({ ...r.dns });
  return out;
}

/** Drops undefined members so JSON output and deep equality stay clean. */
function prune<T extends object>(o: T): T {
  for (const k of Object.keys(o) as (keyof T)[]) if (o[k] === undefined) delete o[k];
  return o;
}

function describe(v: unknown): string {
  if (v === undefined) return 'nothing';
  const s = JSON.stringify(v);
  return s.length > 120 ? `${s.slice(0, 117)}...` : s;
}
