/**
 * `doctor serve`: the node's pod networking as Prometheus metrics, for a DaemonSet. Every interval it reads the
 * node as `doctor node` does, asks STATUS of the network the runtime uses, takes the call log our plugins
 * append to (netlib's calls.ts) and, with --gc, reclaims what gone sandboxes left (`doctor node --gc --apply`).
 * Each metric says what one of those found; a scrape reads what the last round set.
 */
import * as fs from 'node:fs';
import { CALL_LOG_DIR, takeCalls } from '@cnikit/netlib';
import { HealthServer, MetricsIn } from '@cnikit/kube';
import { Registry } from '@cnikit/kube/prom';
import { gcNode } from './node/gc';
import { joinNode, type AttachmentState, type NodeRow, type NodeSources } from './node/join';
import { readNode, type SourceOptions } from './node/sources';
import { networkStatus, type NetworkStatus } from './pod';

/** Plugin process lifetimes (start-up included): 10 ms to 30 s. */
const CALL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const STATES: AttachmentState[] = ['healthy', 'leaked', 'broken', 'conflicting'];

export class NodeMetrics {
  readonly registry = new Registry();
  private readonly m = new MetricsIn(this.registry, CALL_BUCKETS);
  readonly attachments = this.m.gauge('cnikit_attachments', "Pod attachments on the node by doctor node's verdict", ['state']);
  readonly pluginAttachments = this.m.gauge('cnikit_plugin_attachments', 'Cached attachments whose chain has the plugin', ['plugin']);
  readonly leakedObjects = this.m.gauge('cnikit_leaked_objects', 'Objects held by sandboxes the runtime no longer knows', ['kind']);
  readonly statusOk = this.m.gauge('cnikit_status_ok', "1 when the plugin's STATUS succeeded in the last round", ['network', 'plugin']);
  readonly statusFailures = this.m.counter('cnikit_status_failures_total', 'STATUS calls that failed', ['network', 'plugin']);
  readonly calls = this.m.histogram('cnikit_cni_call_duration_seconds', "Our plugins' calls: the process's whole life", [
    'plugin',
    'command',
    'result',
  ]);
  readonly reclaimed = this.m.counter('cnikit_reclaimed_objects_total', 'Objects of gone sandboxes reclaimed by --gc');
  readonly gcRuns = this.m.counter('cnikit_gc_runs_total', '--gc rounds', ['result']);
  readonly roundErrors = this.m.counter('cnikit_doctor_round_errors_total', 'Rounds that could not read a source', ['source']);

  /** The node's attachments: every state (0 included), each plugin, each kind of leaked object. */
  observeNode(s: NodeSources, rows: NodeRow[] = joinNode(s)): void {
    for (const st of STATES) this.attachments.set({ state: st }, rows.filter((r) => r.state === st).length);
    this.pluginAttachments.reset();
    for (const a of s.cached) for (const p of new Set(a.plugins)) this.pluginAttachments.inc({ plugin: p });
    this.leakedObjects.reset();
    for (const kind of ['cache', 'lease', 'veth', 'coil', 'router', 'terway', 'gcp-ipam', 'cilium-eni'])
      this.leakedObjects.set({ kind }, 0);
    for (const r of rows.filter((x) => x.sandbox === 'gone')) for (const o of r.objects) this.leakedObjects.inc({ kind: o.split(' ')[0]! });
  }

  observeStatus(st: NetworkStatus): void {
    this.statusOk.reset();
    for (const p of st.plugins) {
      const labels = { network: st.network ?? '', plugin: p.type };
      this.statusOk.set(labels, p.ok ? 1 : 0);
      if (!p.ok) this.statusFailures.inc(labels);
    }
  }

  observeCalls(records: { plugin: string; command: string; ok: boolean; ms: number }[]): void {
    for (const r of records) this.calls.observe({ plugin: r.plugin, command: r.command, result: r.ok ? 'ok' : 'error' }, r.ms / 1000);
  }
}

export interface ServeOptions extends SourceOptions {
  confDir: string;
  binDirs: string[];
  callLogDir?: string;
  gc: boolean;
}

const objectCount = (rows: NodeRow[]): number => rows.reduce((n, r) => n + r.objects.length, 0);

/** One round: each source on its own, so that one that cannot be read leaves the others' metrics current. */
export async function round(metrics: NodeMetrics, o: ServeOptions): Promise<void> {
  const step = async (source: string, fn: () => Promise<void>): Promise<void> => {
    try {
      await fn();
    } catch (err) {
      metrics.roundErrors.inc({ source });
      process.stderr.write(`doctor serve: ${source}: ${(err as Error).message}\n`);
    }
  };
  await step('calls', async () => metrics.observeCalls(takeCalls(o.callLogDir ?? CALL_LOG_DIR)));
  await step('status', async () => metrics.observeStatus(await networkStatus(o.confDir, o.binDirs)));
  if (o.gc)
    await step('gc', async () => {
      const r = await gcNode({ ...o, apply: true });
      metrics.reclaimed.inc(Math.max(0, objectCount(r.before) - objectCount(r.after)));
      metrics.gcRuns.inc({ result: r.steps.every((x) => x.ok) ? 'ok' : 'error' });
    });
  await step('node', async () => metrics.observeNode((await readNode(o)).sources));
}

/** Serves /metrics, /healthz and /readyz (ready once the first round is done) until SIGTERM or SIGINT. */
export async function serve(o: ServeOptions & { host: string; port: number; intervalMs: number }): Promise<void> {
  fs.mkdirSync(o.callLogDir ?? CALL_LOG_DIR, { recursive: true });
  const metrics = new NodeMetrics();
  let rounds = 0;
  const server = await new HealthServer({ host: o.host, port: o.port, registry: metrics.registry })
    .addReadyCheck('first-round', () => rounds > 0)
    .listen();
  process.stderr.write(`doctor serve: metrics on ${server.url}/metrics, a round every ${o.intervalMs} ms\n`);
  let stopping = false;
  const stop = new Promise<void>((resolve) => {
    for (const sig of ['SIGTERM', 'SIGINT'] as const)
      process.once(sig, () => {
        stopping = true;
        resolve();
      });
  });
  while (!stopping) {
    await round(metrics, o);
    rounds++;
    await Promise.race([stop, new Promise((r) => setTimeout(r, o.intervalMs).unref())]);
  }
  await server.close();
  // plugins stop logging once the directory is gone: nothing piles up on a node without doctor serve
  fs.rmSync(o.callLogDir ?? CALL_LOG_DIR, { recursive: true, force: true });
}
