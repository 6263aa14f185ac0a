/**
 * Prometheus metrics of the kit (prom-client), named after client-go's and controller-runtime's so existing
 * dashboards read them: workqueue_*, controller_runtime_reconcile_*, leader_election_master_status,
 * rest_client_requests_total, plus informer counters. Each KubeMetrics owns its metrics in one Registry
 * (the caller's, or a new one), so several instances (tests, several controllers) never collide.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export interface KubeMetricsOptions {
  registry?: Registry;
  /** Also collect prom-client's process/runtime metrics (CPU, memory, event loop lag). Default false. */
  processMetrics?: boolean;
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
    const registers = [(this.registry = opts.registry ?? new Registry())];
    if (opts.processMetrics) collectDefaultMetrics({ register: this.registry });
    this.workqueueDepth = new Gauge({ name: 'workqueue_depth', help: 'Current depth of the work queue', labelNames: ['name'], registers });
    this.workqueueAdds = new Counter({
      name: 'workqueue_adds_total',
      help: 'Keys added to the work queue',
      labelNames: ['name'],
      registers,
    });
    this.workqueueRetries = new Counter({
      name: 'workqueue_retries_total',
      help: 'Rate-limited re-adds (retries)',
      labelNames: ['name'],
      registers,
    });
    this.workqueueQueueDuration = new Histogram({
      name: 'workqueue_queue_duration_seconds',
      help: 'Time a key waits in the queue before being processed',
      labelNames: ['name'],
      buckets: DURATION_BUCKETS,
      registers,
    });
    this.workqueueWorkDuration = new Histogram({
      name: 'workqueue_work_duration_seconds',
      help: 'Time processing a key takes',
      labelNames: ['name'],
      buckets: DURATION_BUCKETS,
      registers,
    });
    this.reconcileTotal = new Counter({
      name: 'controller_runtime_reconcile_total',
      help: 'Reconciliations by result (success, error, requeue, requeue_after)',
      labelNames: ['controller', 'result'],
      registers,
    });
    this.reconcileErrors = new Counter({
      name: 'controller_runtime_reconcile_errors_total',
      help: 'Reconciliations that failed',
      labelNames: ['controller'],
      registers,
    });
    this.reconcileTime = new Histogram({
      name: 'controller_runtime_reconcile_time_seconds',
      help: 'Time per reconciliation',
      labelNames: ['controller'],
      buckets: DURATION_BUCKETS,
      registers,
    });
    this.informerEvents = new Counter({
      name: 'informer_events_total',
      help: 'Watch events applied to the cache',
      labelNames: ['resource', 'type'],
      registers,
    });
    this.informerLists = new Counter({
      name: 'informer_lists_total',
      help: 'Full lists (initial, or re-list after 410 Gone)',
      labelNames: ['resource', 'reason'],
      registers,
    });
    this.informerWatches = new Counter({
      name: 'informer_watches_total',
      help: 'Watch requests opened (resumes included)',
      labelNames: ['resource'],
      registers,
    });
    this.informerCacheSize = new Gauge({
      name: 'informer_cache_objects',
      help: 'Objects in the informer cache',
      labelNames: ['resource'],
      registers,
    });
    this.leaderStatus = new Gauge({
      name: 'leader_election_master_status',
      help: '1 while this process leads the lease',
      labelNames: ['name'],
      registers,
    });
    this.leaderTransitions = new Counter({
      name: 'leader_election_transitions_total',
      help: 'Times this process acquired or lost leadership',
      labelNames: ['name'],
      registers,
    });
    this.restRequests = new Counter({
      name: 'rest_client_requests_total',
      help: 'API requests by HTTP status code and method',
      labelNames: ['code', 'method'],
      registers,
    });
    this.restLatency = new Histogram({
      name: 'rest_client_request_duration_seconds',
      help: 'API request latency',
      labelNames: ['method'],
      buckets: DURATION_BUCKETS,
      registers,
    });
  }

  /** A transport observer feeding rest_client_* (pass to KubeTransport's observer). */
  observeRequests(): (method: string, status: number, seconds: number) => void {
    return (method, status, seconds) => {
      this.restRequests.inc({ code: status === 0 ? '<error>' : String(status), method });
      this.restLatency.observe({ method }, seconds);
    };
  }
}
