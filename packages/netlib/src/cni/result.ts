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
  const r = fieldReader(opts.code ?? CniCode.InvalidNetworkConfig);
  const obj = decodeResult(raw, field);
  if (!isObject(obj)) return r.bad(field, 'a JSON object', obj);
  const out: Result = { cniVersion: resultVersion(r, obj, field, opts.version) };

  const interfaces = r.array(obj.interfaces, `${field}.interfaces`);
  if (interfaces) out.interfaces = interfaces.map((it, i) => parseInterface(r, it, `${field}.interfaces[${i}]`));
  const ips = r.array(obj.ips, `${field}.ips`);
  if (ips) {
    const count = out.interfaces?.length ?? 0;
    out.ips = ips.map((it, i) => parseIpConfig(r, it, `${field}.ips[${i}]`, count));
  }
  const routes = r.array(obj.routes, `${field}.routes`);
  if (routes) out.routes = routes.map((it, i) => parseRoute(r, it, `${field}.routes[${i}]`));
  if (!absent(obj.dns)) {
    const dns = parseDns(r, obj.dns, `${field}.dns`);
    if (Object.keys(dns).length > 0) out.dns = dns;
  }
  return out;
}

/**
 * Typed reads of one field each; a wrong type throws `code` naming the field's
 * path, the expected form and the value received. Absent (or null) reads as undefined.
 */
interface FieldReader {
  bad(path: string, expected: string, got: unknown): never;
  str(v: unknown, path: string): string | undefined;
  uint(v: unknown, path: string): number | undefined;
  strings(v: unknown, path: string): string[] | undefined;
  array(v: unknown, path: string): unknown[] | undefined;
}

function fieldReader(code: number): FieldReader {
  const bad = (path: string, expected: string, got: unknown): never => {
    throw new CniError(code, `invalid ${path}`, `expected ${expected}, got ${describe(got)}`);
  };
  return {
    bad,
    str: (v, path) => (absent(v) ? undefined : typeof v === 'string' ? v : bad(path, 'a string', v)),
    uint: (v, path) =>
      absent(v) ? undefined : Number.isSafeInteger(v) && (v as number) >= 0 ? (v as number) : bad(path, 'a non-negative integer', v),
    strings: (v, path) => {
      if (absent(v)) return undefined;
      if (!Array.isArray(v)) return bad(path, 'an array of strings', v);
      return v.map((s, i) => (typeof s === 'string' ? s : bad(`${path}[${i}]`, 'a string', s)));
    },
    array: (v, path) => (absent(v) ? undefined : Array.isArray(v) ? v : bad(path, 'an array', v)),
  };
}

/** A string or Buffer is JSON text (code 6 when it does not decode); anything else is taken as already decoded. */
function decodeResult(raw: unknown, field: string): unknown {
  if (typeof raw !== 'string' && !Buffer.isBuffer(raw)) return raw;
  try {
    return JSON.parse(raw.toString());
  } catch (err) {
    throw new CniError(CniCode.DecodeFailure, `failed to decode ${field}`, (err as Error).message, { cause: err });
  }
}

/** The version to read the result as (the caller's, else the result's own); code 1 when unsupported. */
function resultVersion(r: FieldReader, obj: Json, field: string, asVersion: string | undefined): string {
  const version = asVersion ?? obj.cniVersion;
  if (typeof version !== 'string') return r.bad(`${field}.cniVersion`, 'a version string', version);
  if (!isSupportedVersion(version)) {
    throw new CniError(
      CniCode.IncompatibleVersion,
      'incompatible CNI versions',
      `${field} is ${JSON.stringify(version)}, supported ${JSON.stringify(SUPPORTED_VERSIONS)}`,
    );
  }
  return version;
}

function parseInterface(r: FieldReader, it: unknown, p: string): CniInterface {
  if (!isObject(it)) return r.bad(p, 'an object', it);
  if (typeof it.name !== 'string' || it.name === '') return r.bad(`${p}.name`, 'a non-empty string', it.name);
  return prune<CniInterface>({
    name: it.name,
    mac: r.str(it.mac, `${p}.mac`),
    mtu: r.uint(it.mtu, `${p}.mtu`),
    sandbox: r.str(it.sandbox, `${p}.sandbox`),
    socketPath: r.str(it.socketPath, `${p}.socketPath`),
    pciID: r.str(it.pciID, `${p}.pciID`),
  });
}

/** `interfaceCount`: how many interfaces the result lists (an ip's `interface` indexes into them). */
function parseIpConfig(r: FieldReader, it: unknown, p: string, interfaceCount: number): CniIpConfig {
  if (!isObject(it)) return r.bad(p, 'an object', it);
  if (typeof it.address !== 'string' || !isValidCidr(it.address))
    return r.bad(`${p}.address`, 'an address in CIDR form like "10.1.0.5/24"', it.address);
  const family = ipVersionOf(it.address);
  const gateway = r.str(it.gateway, `${p}.gateway`);
  if (gateway !== undefined && (!isValidIp(gateway) || ipVersionOf(gateway) !== family)) {
    r.bad(`${p}.gateway`, `an IPv${family} address`, gateway);
  }
  // 0.x results carry the family twice; a contradiction means the producer is broken.
  if (!absent(it.version) && it.version !== family) r.bad(`${p}.version`, `"${family}" (the family of ${it.address})`, it.version);
  const index = r.uint(it.interface, `${p}.interface`);
  if (index !== undefined && index >= interfaceCount) {
    r.bad(`${p}.interface`, `an index into interfaces (${interfaceCount} entries)`, index);
  }
  return prune<CniIpConfig>({ address: it.address, gateway, interface: index });
}

function parseRoute(r: FieldReader, it: unknown, p: string): CniRoute {
  if (!isObject(it)) return r.bad(p, 'an object', it);
  if (typeof it.dst !== 'string' || !isValidCidr(it.dst)) return r.bad(`${p}.dst`, 'a CIDR like "0.0.0.0/0"', it.dst);
  const gw = r.str(it.gw, `${p}.gw`);
  if (gw !== undefined && !isValidIp(gw)) r.bad(`${p}.gw`, 'an IP address', gw);
  return prune<CniRoute>({
    dst: it.dst,
    gw,
    mtu: r.uint(it.mtu, `${p}.mtu`),
    advmss: r.uint(it.advmss, `${p}.advmss`),
    priority: r.uint(it.priority, `${p}.priority`),
    table: r.uint(it.table, `${p}.table`),
    scope: r.uint(it.scope, `${p}.scope`),
  });
}

function parseDns(r: FieldReader, d: unknown, p: string): CniDns {
  if (!isObject(d)) return r.bad(p, 'an object', d);
  return prune<CniDns>({
    nameservers: r.strings(d.nameservers, `${p}.nameservers`),
    domain: r.str(d.domain, `${p}.domain`),
    search: r.strings(d.search, `${p}.search`),
    options: r.strings(d.options, `${p}.options`),
  });
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
