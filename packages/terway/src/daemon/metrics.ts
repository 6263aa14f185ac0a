/**
 * terwayd's Prometheus metrics, named after Terway's (`terway_resource_pool_*`,
 * `terway_aliyun_openapi_latency`, `terway_rpc_latency`) so its dashboards read them;
 * latencies in milliseconds as there. Pool gauges are read from the pool when
 * scraped (no bookkeeping on the allocation path). Served with @cnikit/kube's
 * HealthServer on `--metrics-address` (/metrics, /healthz, /readyz).
 *
 * One Registry (@cnikit/kube/prom) per TerwayMetrics so tests and several daemons never collide.
 */
import { Registry, type Counter, type Histogram } from '@cnikit/kube/prom';
import { HealthServer, MetricsIn } from '@cnikit/kube';
import type { PoolConfig, PoolStats } from '../pool';

/** Milliseconds: OpenAPI calls take tens of ms to seconds (attach polls), RPCs up to the 120 s deadline. */
const LATENCY_BUCKETS_MS = [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000, 120_000];

export interface PoolView {
  stats(): PoolStats;
  readonly config: PoolConfig;
}

export class TerwayMetrics {
  readonly registry = new Registry();
  readonly openApiLatency: Histogram<'api' | 'error'>;
  readonly rpcLatency: Histogram<'method' | 'error'>;
  readonly gcReleased: Counter<'mode'>;
  readonly repairs: Counter<'kind'>;
  private pool: PoolView | undefined;

  constructor() {
    const m = new MetricsIn(this.registry, LATENCY_BUCKETS_MS);
    // Read from the pool when scraped, labelled name="eniip" as Terway's are.
    const gauge = (name: string, help: string, read: (p: PoolView) => number): void => {
      m.gauge(name, help, ['name'], (g) => {
        if (this.pool) g.set({ name: 'eniip' }, read(this.pool));
      });
    };
    gauge('terway_resource_pool_idle_count', 'Idle IPs in the resource pool', (p) => p.stats().idle);
    gauge('terway_resource_pool_total_count', 'IPs the pool holds (idle, in use, reserved, being released)', (p) => {
      const s = p.stats();
      return s.idle + s.used + s.reserved + s.releasing;
    });
    gauge('terway_resource_pool_used_count', 'IPs held by pods', (p) => p.stats().used);
    gauge('terway_resource_pool_max_idle_count', 'max_pool_size in force', (p) => p.config.maxPoolSize);
    gauge('terway_resource_pool_min_idle_count', 'min_pool_size in force', (p) => p.config.minPoolSize);
    gauge('terway_resource_pool_capacity', 'Most IPs the pool may hold (ENI quota x IPs per ENI)', (p) => p.stats().capacity);
    gauge('terway_resource_pool_eni_count', 'Secondary ENIs the pool holds', (p) => p.stats().enis);
    gauge('terway_resource_pool_waiters', 'AllocIP calls waiting for the cloud', (p) => p.stats().waiters);
    this.openApiLatency = m.histogram(
      'terway_aliyun_openapi_latency',
      'Alibaba Cloud OpenAPI call latency (ms), by API and error code ("" on success)',
      ['api', 'error'],
    );
    this.rpcLatency = m.histogram('terway_rpc_latency', 'TerwayBackend gRPC latency (ms), by method and error ("" on success)', [
      'method',
      'error',
    ]);
    this.gcReleased = m.counter('terway_gc_released_total', 'Leases released by GC (pods gone without CNI DEL)', ['mode']);
    this.repairs = m.counter('terway_repair_changes_total', 'Kernel objects the datapath repair added or removed', ['kind']);
  }

  /** The pool whose gauges are reported. */
  watchPool(p: PoolView): void {
    this.pool = p;
  }

  /** Serves /metrics (and /healthz, /readyz) on host:port. */
  async serve(address: string): Promise<HealthServer> {
    const i = address.lastIndexOf(':');
    const host = i > 0 ? address.slice(0, i).replace(/^\[|\]$/g, '') : '127.0.0.1';
    const port = Number(i >= 0 ? address.slice(i + 1) : address);
    if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--metrics-address: expected host:port, got "${address}"`);
    return new HealthServer({ host, port, registry: this.registry }).listen();
  }
}
