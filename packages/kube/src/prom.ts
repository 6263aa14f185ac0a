/**
 * Prometheus metrics of every daemon here: counters, gauges and histograms with labels in a Registry that
 * writes the text exposition format (version 0.0.4) exactly as prom-client wrote it before (names, label
 * order, `le` first in buckets, `+Inf`, escaping), and the process metrics Prometheus expects of a process.
 * Written here rather than taken from prom-client: loading prom-client costs each daemon about 14 MiB of
 * resident memory (docs/kube.md, "Metrics"), and the daemons use a small part of it.
 */
import * as fs from 'node:fs';

export type LabelValues<L extends string> = Partial<Record<L, string | number>>;

interface Series {
  labels: Record<string, string | number>;
  value: number;
  /** Histograms: per-bucket counts (not cumulative) and the sum. */
  buckets?: number[];
  sum?: number;
}

export interface MetricOptions<L extends string> {
  name: string;
  help: string;
  labelNames?: readonly L[];
  registers?: Registry[];
  /** Called with the metric as `this` at each scrape, before its values are read (a gauge read from its source). */
  collect?(): void | Promise<void>;
}

/** The key of a label set: its values in labelNames order. */
const keyOf = (names: readonly string[], labels: Record<string, string | number>): string =>
  names.map((n) => String(labels[n] ?? '')).join('\u0000');

const escape = (s: string): string => s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
const formatValue = (v: number): string => (Number.isNaN(v) ? 'Nan' : v === Infinity ? '+Inf' : v === -Infinity ? '-Inf' : String(v));
const formatLabels = (labels: Record<string, string | number>): string[] =>
  Object.entries(labels).map(([k, v]) => `${k}="${typeof v === 'string' ? escape(v).replace(/"/g, '\\"') : v}"`);

abstract class Metric<L extends string> {
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly L[];
  protected series = new Map<string, Series>();
  private readonly collectFn: (() => void | Promise<void>) | undefined;
  abstract readonly type: 'counter' | 'gauge' | 'histogram';

  constructor(o: MetricOptions<L>) {
    this.name = o.name;
    this.help = o.help;
    this.labelNames = o.labelNames ?? [];
    this.collectFn = o.collect?.bind(this);
    for (const r of o.registers ?? []) r.registerMetric(this);
  }

  /** Every series gone; an unlabelled metric starts again at zero. */
  reset(): void {
    this.series.clear();
    if (this.labelNames.length === 0) this.at({});
  }

  /** The series of one label set gone. */
  remove(labels: LabelValues<L>): void {
    this.series.delete(keyOf(this.labelNames, labels as Record<string, string | number>));
  }

  protected at(labels: LabelValues<L>): Series {
    for (const k of Object.keys(labels)) {
      if (!this.labelNames.includes(k as L))
        throw new Error(`Added label "${k}" is not included in initial labelset: ${JSON.stringify(this.labelNames)}`);
    }
    const key = keyOf(this.labelNames, labels as Record<string, string | number>);
    let s = this.series.get(key);
    if (!s) this.series.set(key, (s = this.fresh({ ...(labels as Record<string, string | number>) })));
    return s;
  }

  protected fresh(labels: Record<string, string | number>): Series {
    return { labels, value: 0 };
  }

  /** Overloads (labels, value) and (value), as prom-client takes them. */
  protected static args<L extends string>(a?: LabelValues<L> | number, b?: number): [LabelValues<L>, number | undefined] {
    return typeof a === 'object' ? [a, b] : [{}, a];
  }

  protected lines(): string[] {
    return [...this.series.values()].map((s) => line(this.name, s.labels, s.value));
  }

  async exposition(): Promise<string> {
    await this.collectFn?.();
    return [`# HELP ${escape(this.name)} ${escape(this.help)}`, `# TYPE ${escape(this.name)} ${this.type}`, ...this.lines()].join('\n');
  }
}

function line(name: string, labels: Record<string, string | number>, value: number, first: Record<string, string> = {}): string {
  const parts = [...formatLabels(first), ...formatLabels(labels)];
  return `${name}${parts.length ? `{${parts.join(',')}}` : ''} ${formatValue(value)}`;
}

export class Counter<L extends string = string> extends Metric<L> {
  readonly type = 'counter';
  constructor(o: MetricOptions<L>) {
    super(o);
    this.reset();
  }
  inc(labels?: LabelValues<L> | number, value?: number): void {
    const [l, v = 1] = Metric.args(labels, value);
    if (v < 0) throw new Error('It is not possible to decrease a counter');
    this.at(l).value += v;
  }
}

export class Gauge<L extends string = string> extends Metric<L> {
  readonly type = 'gauge';
  constructor(o: MetricOptions<L>) {
    super(o);
    this.reset();
  }
  set(labels: LabelValues<L> | number, value?: number): void {
    const [l, v] = Metric.args(labels, value);
    this.at(l).value = v ?? 0;
  }
  inc(labels?: LabelValues<L> | number, value?: number): void {
    const [l, v = 1] = Metric.args(labels, value);
    this.at(l).value += v;
  }
  dec(labels?: LabelValues<L> | number, value?: number): void {
    const [l, v = 1] = Metric.args(labels, value);
    this.at(l).value -= v;
  }
}

const DEFAULT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export class Histogram<L extends string = string> extends Metric<L> {
  readonly type = 'histogram';
  readonly upperBounds: number[];
  constructor(o: MetricOptions<L> & { buckets?: number[] }) {
    super(o);
    this.upperBounds = [...(o.buckets ?? DEFAULT_BUCKETS)].sort((a, b) => a - b);
    this.reset();
  }
  protected override fresh(labels: Record<string, string | number>): Series {
    return { labels, value: 0, sum: 0, buckets: this.upperBounds.map(() => 0) };
  }
  observe(labels: LabelValues<L> | number, value?: number): void {
    const [l, v = 0] = Metric.args(labels, value);
    const s = this.at(l);
    const i = this.upperBounds.findIndex((b) => v <= b);
    if (i >= 0) s.buckets![i]!++;
    s.value++;
    s.sum! += v;
  }
  /** Starts timing; the function returned observes the seconds since (with more labels if given) and returns them. */
  startTimer(labels: LabelValues<L> = {}): (more?: LabelValues<L>) => number {
    const t0 = process.hrtime.bigint();
    return (more = {}) => {
      const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
      this.observe({ ...labels, ...more }, seconds);
      return seconds;
    };
  }
  protected override lines(): string[] {
    return [...this.series.values()].flatMap((s) => {
      let acc = 0;
      const buckets = this.upperBounds.map((b, i) => line(`${this.name}_bucket`, s.labels, (acc += s.buckets![i]!), { le: String(b) }));
      return [
        ...buckets,
        line(`${this.name}_bucket`, s.labels, s.value, { le: '+Inf' }),
        line(`${this.name}_sum`, s.labels, s.sum!),
        line(`${this.name}_count`, s.labels, s.value),
      ];
    });
  }
}

export class Registry {
  readonly contentType = 'text/plain; version=0.0.4; charset=utf-8';
  private readonly metricsByName = new Map<string, Metric<string>>();

  registerMetric(m: Metric<string>): void {
    if (this.metricsByName.has(m.name)) throw new Error(`A metric with the name ${m.name} has already been registered.`);
    this.metricsByName.set(m.name, m);
  }

  async getSingleMetricAsString(name: string): Promise<string> {
    return (await this.metricsByName.get(name)?.exposition()) ?? '';
  }

  /** The text exposition of every metric, in the order registered. */
  async metrics(): Promise<string> {
    const parts = await Promise.all([...this.metricsByName.values()].map((m) => m.exposition()));
    return `${parts.join('\n\n')}\n`;
  }
}

/** Process metrics under prom-client's names: CPU, start time, memory, open file descriptors, heap, the runtime's version. */
export function collectDefaultMetrics(o: { register: Registry }): void {
  const registers = [o.register];
  // each read at scrape time; a counter is set to the process's own total, which only grows
  const counter = (name: string, help: string, read: () => number): unknown =>
    new Counter({
      name,
      help,
      registers,
      collect(this: Counter) {
        this.reset();
        this.inc(read());
      },
    });
  const gauge = (name: string, help: string, read: () => number): unknown =>
    new Gauge({
      name,
      help,
      registers,
      collect(this: Gauge) {
        this.set(read());
      },
    });
  counter('process_cpu_user_seconds_total', 'Total user CPU time spent in seconds.', () => process.cpuUsage().user / 1e6);
  counter('process_cpu_system_seconds_total', 'Total system CPU time spent in seconds.', () => process.cpuUsage().system / 1e6);
  counter('process_cpu_seconds_total', 'Total user and system CPU time spent in seconds.', () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1e6;
  });
  gauge('process_start_time_seconds', 'Start time of the process since unix epoch in seconds.', () =>
    Math.round(Date.now() / 1000 - process.uptime()),
  );
  gauge('process_resident_memory_bytes', 'Resident memory size in bytes.', () => process.memoryUsage.rss());
  gauge('process_open_fds', 'Number of open file descriptors.', () => fs.readdirSync('/proc/self/fd').length - 1);
  gauge('nodejs_heap_size_total_bytes', 'Process heap size from Node.js in bytes.', () => process.memoryUsage().heapTotal);
  gauge('nodejs_heap_size_used_bytes', 'Process heap size used from Node.js in bytes.', () => process.memoryUsage().heapUsed);
  gauge('nodejs_external_memory_bytes', 'Node.js external memory size in bytes.', () => process.memoryUsage().external);
  const [major = 0, minor = 0, patch = 0] = process.versions.node.split('.').map(Number);
  const labelNames = ['version', 'major', 'minor', 'patch'] as const;
  new Gauge({ name: 'nodejs_version_info', help: 'Node.js version info.', labelNames, registers }).set(
    { version: process.version, major, minor, patch },
    1,
  );
}
