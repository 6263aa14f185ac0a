/**
 * The pool part of the `eni_conf` key of the `eni-config` ConfigMap, with the
 * snake_case names of Terway. Parsed and validated once; every error names the
 * field, the expected form and the value received.
 */
import { ConfigError, ip } from '@cnikit/netlib';

export type VSwitchPolicy = 'ordered' | 'random' | 'most';

export interface PoolConfig {
  /** Idle IPs above this are returned to the cloud at once. */
  maxPoolSize: number;
  /** The pool keeps at least this many idle IPs. */
  minPoolSize: number;
  /** IPs acquired at start-up before min/max rules apply (0: none). */
  warmUpSize: number;
  /** Idle IPs above min_pool_size that have been idle this long are reclaimed (0: never). */
  idleReclaimAfterMs: number;
  idleReclaimBatchSize: number;
  idleReclaimIntervalMs: number;
  /** ENIs kept attached even when empty. */
  minEni: number;
  /** ENIs allowed besides the primary one (further capped by the instance type). 0: the quota. */
  maxEni: number;
  /** zone -> vSwitch IDs, in preference order. */
  vswitches: Record<string, string[]>;
  vswitchPolicy: VSwitchPolicy;
  securityGroups: string[];
  serviceCidr?: string;
  virtualType: 'veth' | 'ipvlan';
  /** enable_eni_trunking: terwayd keeps a trunk ENI attached and registers aliyun/member-eni. */
  enableTrunk: boolean;
  /** ip_stack: ipv4 (default) or dual (every pod also gets an IPv6 of its ENI). */
  ipStack: 'ipv4' | 'dual';
}

export const DEFAULT_POOL: PoolConfig = {
  maxPoolSize: 5,
  minPoolSize: 0,
  warmUpSize: 0,
  idleReclaimAfterMs: 0,
  idleReclaimBatchSize: 1,
  idleReclaimIntervalMs: 60_000,
  minEni: 0,
  maxEni: 0,
  vswitches: {},
  vswitchPolicy: 'ordered',
  securityGroups: [],
  virtualType: 'veth',
  enableTrunk: false,
  ipStack: 'ipv4',
};

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Go-style durations ("90s", "1m30s", "500ms"); a bare number means seconds. */
export function parseDuration(field: string, v: unknown): number {
  if (typeof v === 'number' && Number.isFinite(v) && v >= 0) return v * 1000;
  if (typeof v !== 'string' || v === '') throw new ConfigError(field, 'a duration like "30s", "5m" or "1h30m"', v);
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/gy;
  let total = 0;
  let pos = 0;
  let m: RegExpExecArray | null;
  while ((m = re.exec(v)) !== null) {
    total += Number(m[1]) * UNIT_MS[m[2]!]!;
    pos = re.lastIndex;
  }
  if (pos !== v.length) throw new ConfigError(field, 'a duration like "30s", "5m" or "1h30m"', v);
  return total;
}

function count(conf: Record<string, unknown>, key: string, def: number): number {
  const v = conf[key];
  if (v === undefined || v === null) return def;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw new ConfigError(`eni_conf.${key}`, 'a non-negative integer', v);
  return v;
}

function strings(field: string, v: unknown): string[] {
  if (!Array.isArray(v) || v.some((s) => typeof s !== 'string' || s === '')) throw new ConfigError(field, 'a list of non-empty strings', v);
  return v as string[];
}

export function parsePoolConfig(raw: unknown): PoolConfig {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new ConfigError('eni_conf', 'a JSON object', raw);
  const c = raw as Record<string, unknown>;
  const out: PoolConfig = { ...DEFAULT_POOL, vswitches: {}, securityGroups: [] };
  out.maxPoolSize = count(c, 'max_pool_size', DEFAULT_POOL.maxPoolSize);
  out.minPoolSize = count(c, 'min_pool_size', DEFAULT_POOL.minPoolSize);
  if (out.minPoolSize > out.maxPoolSize) {
    throw new ConfigError('eni_conf.min_pool_size', `at most max_pool_size (${out.maxPoolSize})`, out.minPoolSize);
  }
  out.warmUpSize = count(c, 'ip_warm_up_size', 0);
  if (c['idle_ip_reclaim_after'] !== undefined)
    out.idleReclaimAfterMs = parseDuration('eni_conf.idle_ip_reclaim_after', c['idle_ip_reclaim_after']);
  if (c['idle_ip_reclaim_interval'] !== undefined)
    out.idleReclaimIntervalMs = parseDuration('eni_conf.idle_ip_reclaim_interval', c['idle_ip_reclaim_interval']);
  out.idleReclaimBatchSize = count(c, 'idle_ip_reclaim_batch_size', DEFAULT_POOL.idleReclaimBatchSize);
  if (out.idleReclaimBatchSize === 0) throw new ConfigError('eni_conf.idle_ip_reclaim_batch_size', 'an integer >= 1', 0);
  out.minEni = count(c, 'min_eni', 0);
  out.maxEni = count(c, 'max_eni', 0);
  if (out.maxEni > 0 && out.minEni > out.maxEni) throw new ConfigError('eni_conf.min_eni', `at most max_eni (${out.maxEni})`, out.minEni);
  const vs = c['vswitches'];
  if (vs !== undefined) {
    if (typeof vs !== 'object' || vs === null || Array.isArray(vs))
      throw new ConfigError('eni_conf.vswitches', 'an object {zone: [vSwitch IDs]}', vs);
    for (const [zone, ids] of Object.entries(vs)) out.vswitches[zone] = strings(`eni_conf.vswitches.${zone}`, ids);
  }
  const pol = c['vswitch_selection_policy'] ?? 'ordered';
  if (pol !== 'ordered' && pol !== 'random' && pol !== 'most')
    throw new ConfigError('eni_conf.vswitch_selection_policy', '"ordered", "random" or "most"', pol);
  out.vswitchPolicy = pol;
  if (c['security_groups'] !== undefined) out.securityGroups = strings('eni_conf.security_groups', c['security_groups']);
  if (typeof c['security_group'] === 'string' && c['security_group'] !== '') out.securityGroups.unshift(c['security_group']);
  const svc = c['service_cidr'];
  if (svc !== undefined) {
    if (typeof svc !== 'string' || !svc.split(',').every((s) => ip.isValidCidr(s.trim())))
      throw new ConfigError('eni_conf.service_cidr', 'a CIDR (or comma-separated CIDRs)', svc);
    out.serviceCidr = svc;
  }
  const vt = c['eniip_virtual_type'] ?? 'veth';
  if (typeof vt !== 'string' || !['veth', 'ipvlan'].includes(vt.toLowerCase()))
    throw new ConfigError('eni_conf.eniip_virtual_type', '"veth" or "ipvlan"', vt);
  out.virtualType = vt.toLowerCase() as 'veth' | 'ipvlan';
  const trunk = c['enable_eni_trunking'] ?? false;
  if (typeof trunk !== 'boolean') throw new ConfigError('eni_conf.enable_eni_trunking', 'true or false', trunk);
  out.enableTrunk = trunk;
  const stack = c['ip_stack'] ?? 'ipv4';
  // IPv6-only pods are not done: refused here rather than half-working.
  if (stack !== 'ipv4' && stack !== 'dual') throw new ConfigError('eni_conf.ip_stack', '"ipv4" or "dual"', stack);
  out.ipStack = stack;
  return out;
}
