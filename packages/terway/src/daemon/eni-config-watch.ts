/**
 * Live changes of the `eni-config` ConfigMap. terwayd watches the one object
 * (informer on kube-system/eni-config, field selector on its name) and, on
 * every change:
 *
 * - validates `eni_conf` and `10-terway.conf` first: an invalid edit is
 *   refused whole (logged, counted) and the config in force stays;
 * - applies the keys that can change under running pods (LIVE_KEYS: pool
 *   sizes, idle reclaim, min/max ENIs, vSwitches and their policy, security
 *   groups, service_cidr for new pods);
 * - keeps the old value of every key that needs a restart (RESTART_KEYS: the
 *   datapath of running pods, start-up-only work, credentials, the trunk ENI)
 *   and reports it as pending until terwayd restarts;
 * - rewrites `10-terway.conf` in the CNI config dir (the binary reads it on
 *   each call, so that takes effect for the next pod).
 */
import { ConfigMaps, Informer, clientFor, type ConfigMap, type KubeTransport } from '@cnikit/kube';
import { parsePoolConfig, type PoolConfig } from '../pool';
import { parseEniConfigData, writeCniConf } from './eni-config';

/** eni_conf keys applied to the running daemon. */
export const LIVE_KEYS = [
  'max_pool_size',
  'min_pool_size',
  'idle_ip_reclaim_after',
  'idle_ip_reclaim_batch_size',
  'idle_ip_reclaim_interval',
  'min_eni',
  'max_eni',
  'vswitches',
  'vswitch_selection_policy',
  'security_group',
  'security_groups',
  'service_cidr',
] as const;

/** eni_conf keys read once at start-up: a change waits for a restart of terwayd. */
export const RESTART_KEYS = [
  'ip_warm_up_size',
  'eniip_virtual_type',
  'enable_eni_trunking',
  'ip_stack',
  'access_key',
  'access_secret',
  'credential_path',
] as const;

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

/** Keys whose value differs between two eni_conf objects, split by how they apply (unknown keys count as live: nothing reads them). */
export function diffEniConf(before: Record<string, unknown>, after: Record<string, unknown>): { live: string[]; restart: string[] } {
  const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
  const changed = keys.filter((k) => !same(before[k], after[k]));
  const restart = changed.filter((k) => (RESTART_KEYS as readonly string[]).includes(k));
  return { live: changed.filter((k) => !restart.includes(k)), restart };
}

export interface EniConfigWatchOptions {
  transport: KubeTransport;
  namespace: string;
  name: string;
  /** The eni_conf terwayd started with. */
  initial: Record<string, unknown>;
  /** Applies the live part (called with the merged config: live keys new, restart keys as at start-up). */
  apply(config: PoolConfig, eniConf: Record<string, unknown>): void;
  /** Where 10-terway.conf is rewritten when it changes. */
  cniConfDir?: string;
  /** The 10-terway.conf written at start-up (not rewritten unless it changes). */
  initialCniConf?: string;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

export interface EniConfigWatch {
  /** The eni_conf in force. */
  readonly current: Record<string, unknown>;
  /** Keys changed in the ConfigMap that wait for a restart. */
  readonly pendingRestart: string[];
  readonly stats: { applied: number; rejected: number };
  stop(): Promise<void>;
}

export async function watchEniConfigMap(o: EniConfigWatchOptions): Promise<EniConfigWatch> {
  const log = o.log ?? (() => undefined);
  const startConf = o.initial;
  let current = o.initial;
  let cniText = o.initialCniConf;
  const pending = new Set<string>();
  const stats = { applied: 0, rejected: 0 };
  const onObject = (cm: ConfigMap): void => {
    let parsed;
    try {
      parsed = parseEniConfigData(cm.data);
    } catch (e) {
      stats.rejected++;
      log('eni-config: change refused, keeping the config in force', {
        error: e instanceof Error ? e.message : String(e),
        resourceVersion: cm.metadata.resourceVersion,
      });
      return;
    }
    // Restart keys keep their start-up value; the rest is taken from the ConfigMap.
    const merged: Record<string, unknown> = { ...parsed.eniConf };
    for (const k of RESTART_KEYS) {
      if (k in startConf) merged[k] = startConf[k];
      else delete merged[k];
    }
    pending.clear();
    for (const k of diffEniConf(startConf, parsed.eniConf).restart) pending.add(k);
    let config: PoolConfig;
    try {
      config = parsePoolConfig(merged);
    } catch (e) {
      // e.g. a new min_pool_size above the max in force: refuse rather than half-apply.
      stats.rejected++;
      log('eni-config: change refused, keeping the config in force', { error: e instanceof Error ? e.message : String(e) });
      return;
    }
    const { live } = diffEniConf(current, merged);
    if (live.length) {
      o.apply(config, merged);
      current = merged;
      stats.applied++;
      log('eni-config: applied', { keys: live, resourceVersion: cm.metadata.resourceVersion });
    }
    if (pending.size) log('eni-config: changed keys need a terwayd restart', { keys: [...pending] });
    if (o.cniConfDir && parsed.cniConf !== undefined && parsed.cniConf !== cniText) {
      writeCniConf(o.cniConfDir, parsed.cniConf);
      cniText = parsed.cniConf;
      log('eni-config: rewrote 10-terway.conf', { dir: o.cniConfDir });
    }
  };
  const informer = new Informer(clientFor(o.transport, ConfigMaps), {
    namespace: o.namespace,
    fieldSelector: `metadata.name=${o.name}`,
    name: `configmap ${o.namespace}/${o.name}`,
  });
  informer.addHandlers({ add: onObject, update: (_old, cm) => onObject(cm) });
  await informer.start();
  return {
    get current() {
      return current;
    },
    get pendingRestart() {
      return [...pending];
    },
    stats,
    stop: () => informer.stop(),
  };
}
