// The metrics every daemon serves: the text exposition format (0.0.4) as Prometheus parses it and as prom-client
// wrote it (label order as given, `le` first in buckets, +Inf, escaping, unlabelled series at 0 from the start).
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from '../src/prom';

test('counters, gauges and histograms with and without labels, in the order registered', async () => {
  const r = new Registry();
  const plain = new Counter({ name: 'a_total', help: 'plain', registers: [r] });
  const byCode = new Counter({
    name: 'b_total',
    help: 'by "code"\nand \\ method',
    labelNames: ['method', 'code'] as const,
    registers: [r],
  });
  const g = new Gauge({ name: 'c', help: 'gauge', labelNames: ['pool'] as const, registers: [r] });
  const h = new Histogram({ name: 'd_seconds', help: 'hist', labelNames: ['op'] as const, buckets: [1, 0.1], registers: [r] });
  plain.inc();
  plain.inc(2);
  byCode.inc({ method: 'GET', code: 200 });
  byCode.inc({ method: 'PUT', code: 'a"b\\c' }, 3);
  g.set({ pool: 'x' }, 5);
  g.inc({ pool: 'x' });
  g.dec({ pool: 'x' }, 2);
  g.set({ pool: 'y' }, -Infinity);
  h.observe({ op: 'add' }, 0.05);
  h.observe({ op: 'add' }, 0.5);
  h.observe({ op: 'add' }, 7);
  expect(await r.metrics()).toBe(
    [
      '# HELP a_total plain',
      '# TYPE a_total counter',
      'a_total 3',
      '',
      '# HELP b_total by "code"\\nand \\\\ method',
      '# TYPE b_total counter',
      'b_total{method="GET",code="200"} 1',
      'b_total{method="PUT",code="a\\"b\\\\c"} 3',
      '',
      '# HELP c gauge',
      '# TYPE c gauge',
      'c{pool="x"} 4',
      'c{pool="y"} -Inf',
      '',
      '# HELP d_seconds hist',
      '# TYPE d_seconds histogram',
      'd_seconds_bucket{le="0.1",op="add"} 1',
      'd_seconds_bucket{le="1",op="add"} 2',
      'd_seconds_bucket{le="+Inf",op="add"} 3',
      'd_seconds_sum{op="add"} 7.55',
      'd_seconds_count{op="add"} 3',
      '',
    ].join('\n'),
  );
  expect(r.contentType).toBe('text/plain; version=0.0.4; charset=utf-8');
  g.remove({ pool: 'x' });
  byCode.reset();
  expect(await r.getSingleMetricAsString('c')).toBe('# HELP c gauge\n# TYPE c gauge\nc{pool="y"} -Inf');
  expect(await r.getSingleMetricAsString('b_total')).toBe('# HELP b_total by "code"\\nand \\\\ method\n# TYPE b_total counter');
  expect(() => plain.inc(-1)).toThrow(/not possible to decrease a counter/);
  expect(() => byCode.inc({ nope: 'x' } as never)).toThrow(/"nope" is not included/);
  expect(() => new Counter({ name: 'a_total', help: 'again', registers: [r] })).toThrow(/already been registered/);
});

test('a gauge read at scrape time; a timer observes seconds; the process metrics', async () => {
  const r = new Registry();
  let depth = 7;
  new Gauge({
    name: 'depth',
    help: 'read when scraped',
    registers: [r],
    collect(this: Gauge) {
      this.set(depth);
    },
  });
  const h = new Histogram({ name: 'rt_seconds', help: 'timed', labelNames: ['m', 'code'] as const, registers: [r] });
  const end = h.startTimer({ m: 'Add' });
  expect(end({ code: 'OK' })).toBeGreaterThanOrEqual(0);
  expect(await r.metrics()).toMatch(/^depth 7$/m);
  depth = 9;
  const text = await r.metrics();
  expect(text).toMatch(/^depth 9$/m);
  expect(text).toMatch(/^rt_seconds_bucket\{le="0.005",m="Add",code="OK"\} 1$/m);
  expect(text).toMatch(/^rt_seconds_count\{m="Add",code="OK"\} 1$/m);
  collectDefaultMetrics({ register: r });
  const proc = await r.metrics();
  for (const name of ['process_cpu_seconds_total', 'process_start_time_seconds', 'process_resident_memory_bytes', 'process_open_fds'])
    expect(proc).toMatch(new RegExp(`^${name} (?!0$)[0-9.e+]+$`, 'm'));
  expect(proc).toMatch(new RegExp(`^nodejs_version_info\\{version="${process.version}",major="\\d+",minor="\\d+",patch="\\d+"\\} 1$`, 'm'));
});
