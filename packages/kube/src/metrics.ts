/**
 * Prometheus metrics of the kit (prom.ts), named after client-go's and controller-runtime's so existing
 * dashboards read them: workqueue_*, controller_runtime_reconcile_*, leader_election_master_status,
 * rest_client_requests_total, plus informer counters. Each KubeMetrics owns its metrics in one Registry
 * (the caller's, or a new one), so several instances (tests, several controllers) never collide.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from './prom';

export interface KubeMetricsOptions {
  registry?: Registry;
  /** Also collect the process metrics (CPU, memory, file descriptors, heap; prom.ts). Default false. */
  processMetrics?: boolean;
}

/**
 * Metrics registered in one Registry, each declared in one line: its name, help and labels (and a histogram's
 * buckets). Every metric set of the repository (this kit's, coil's, terway's, the Cilium operator's) is built
 * with it. A gauge may be read when scraped (`collect`) rather than kept up to date on a hot path.
 */
export class MetricsIn {
  private readonly registers: Registry[];
  /** `buckets`: what a histogram declared without its own uses. */
  constructor(
    registry: Registry,
    private readonly buckets?: number[],
  ) {
    this.registers = [registry];
  }

  counter<L extends string = string>(name: string, help: string, labelNames: readonly L[] = []): Counter<L> {
    return new Counter<L>({ name, help, labelNames, registers: this.registers });
  }

  gauge<L extends string = string>(name: string, help: string, labelNames: readonly L[] = [], collect?: (g: Gauge<L>) => void): Gauge<L> {
    return new Gauge<L>({
      name,
      help,
      labelNames,
      registers: this.registers,
      ...(collect
        ? {
            collect(this: Gauge<L>) {
              collect(this);
            },
          }
        : {}),
    });
  }

  histogram<L extends string>(name: string, help: string, labelNames: readonly L[], buckets = this.buckets): Histogram<L> {
    return new Histogram<L>({ name, help, labelNames, buckets, registers: this.registers });
  }
}

const DURATION_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export class KubeMetrics {
  readonly registry: Registry;
  readonly workqueueDepth: Gauge<'name'>;
  readonly workqueueAdds: Counter<'name'>;
  readonly workqueueRetries: Counter<'name'>;
  readonly workqueueQueueDuration: Histogram<'name'>;
  readonly workqueueWorkDuration: Histogram<'name'>;
  readonly reconcileTotal: Counter<'controller' | 'result'>;
  readonly reconcileErrors: Counter<'controller'>;
  readonly reconcileTime: Histogram<'controller'>;
  readonly informerEvents: Counter<'resource' | 'type'>;
  readonly informerLists: Counter<'resource' | 'reason'>;
  readonly informerWatches: Counter<'resource'>;
  readonly informerCacheSize: Gauge<'resource'>;
  readonly leaderStatus: Gauge<'name'>;
  readonly leaderTransitions: Counter<'name'>;
  readonly restRequests: Counter<'code' | 'method'>;
  readonly restLatency: Histogram<'method'>;

  constructor(opts: KubeMetricsOptions = {}) {
    this.registry = opts.registry ?? new Registry();
    if (opts.processMetrics) collectDefaultMetrics({ register: this.registry });
    const m = new MetricsIn(this.registry, DURATION_BUCKETS);
    this.workqueueDepth = m.gauge('workqueue_depth', 'Current depth of the work queue', ['name']);
    this.workqueueAdds = m.counter('workqueue_adds_total', 'Keys added to the work queue', ['name']);
    this.workqueueRetries = m.counter('workqueue_retries_total', 'Rate-limited re-adds (retries)', ['name']);
    this.workqueueQueueDuration = m.histogram('workqueue_queue_duration_seconds', 'Time a key waits in the queue before being processed', [
      'name',
    ]);
    this.workqueueWorkDuration = m.histogram('workqueue_work_duration_seconds', 'Time processing a key takes', ['name']);
    this.reconcileTotal = m.counter(
      'controller_runtime_reconcile_total',
      'Reconciliations by result (success, error, requeue, requeue_after)',
      ['controller', 'result'],
    );
    this.reconcileErrors = m.counter('controller_runtime_reconcile_errors_total', 'Reconciliations that failed', ['controller']);
    this.reconcileTime = m.histogram('controller_runtime_reconcile_time_seconds', 'Time per reconciliation', ['controller']);
    this.informerEvents = m.counter('informer_events_total', 'Watch events applied to the cache', ['resource', 'type']);
    this.informerLists = m.counter('informer_lists_total', 'Full lists (initial, or re-list after 410 Gone)', ['resource', 'reason']);
    this.informerWatches = m.counter('informer_watches_total', 'Watch requests opened (resumes included)', ['resource']);
    this.informerCacheSize = m.gauge('informer_cache_objects', 'Objects in the informer cache', ['resource']);
    this.leaderStatus = m.gauge('leader_election_master_status', '1 while this process leads the lease', ['name']);
    this.leaderTransitions = m.counter('leader_election_transitions_total', 'Times this process acquired or lost leadership', ['name']);
    this.restRequests = m.counter('rest_client_requests_total', 'API requests by HTTP status code and method', ['code', 'method']);
    this.restLatency = m.histogram('rest_client_request_duration_seconds', 'API request latency', ['method']);
  }

  /** A transport observer feeding rest_client_* (pass to KubeTransport's observer). */
  observeRequests(): (method: string, status: number, seconds: number) => void {
    return (method, status, seconds) => {
      this.restRequests.inc({ code: status === 0 ? '<error>' : String(status), method });
      this.restLatency.observe({ method }, seconds);
    };
  }
}
