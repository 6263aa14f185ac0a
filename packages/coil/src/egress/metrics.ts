/**
 * coil-egress metrics: the router pod's conntrack use against its limit (NAT state lives in
 * conntrack: a full table drops new flows) and the number of clients served. Values are read
 * at scrape time, from the pod's own network namespace's /proc/sys.
 */
import { readFileSync } from 'node:fs';
import { MetricsIn } from '@cnikit/kube';
import type { Registry } from '@cnikit/kube/prom';

export interface EgressMetricsOptions {
  registry: Registry;
  namespace: string;
  pod: string;
  egress: string;
  /** Clients currently served (tunnels). */
  clients: () => number;
  /** Where the conntrack sysctls are; default /proc/sys/net/netfilter. */
  netfilterDir?: string;
}

/** A number read from a file, undefined when absent (nf_conntrack not loaded yet) or unreadable. */
export function readCounter(path: string): number | undefined {
  try {
    const v = Number(readFileSync(path, 'utf8').trim());
    return Number.isFinite(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

export function registerEgressMetrics(o: EgressMetricsOptions): void {
  const dir = o.netfilterDir ?? '/proc/sys/net/netfilter';
  const labels = { namespace: o.namespace, pod: o.pod };
  const m = new MetricsIn(o.registry);
  const fromFile = (name: string, help: string, file: string): void => {
    m.gauge(name, help, ['namespace', 'pod'], (g) => {
      const v = readCounter(`${dir}/${file}`);
      if (v !== undefined) g.set(labels, v);
    });
  };
  fromFile('coil_egress_nf_conntrack_entries_count', 'the number of entries in the conntrack table', 'nf_conntrack_count');
  fromFile('coil_egress_nf_conntrack_entries_limit', 'the limit of the conntrack table', 'nf_conntrack_max');
  m.gauge(
    'coil_egress_client_count',
    'the number of client pods this router pod serves (FoU tunnels)',
    ['namespace', 'pod', 'egress'],
    (g) => g.set({ ...labels, egress: o.egress }, o.clients()),
  );
}
