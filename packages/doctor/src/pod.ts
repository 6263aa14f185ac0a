/**
 * `doctor pod NAMESPACE/NAME`: why this pod has no network, in one line, with the evidence behind it.
 *
 * The evidence, each from where its owner keeps it:
 *   - the pod from the API server: scheduled or not, its node, its addresses, why its containers wait;
 *   - its events: the kubelet reports a failed CNI ADD as FailedCreatePodSandBox, with the runtime's error;
 *   - STATUS of every plugin of the network the runtime uses on this node (a 1.1.0 conf): a plugin that fails it
 *     makes the runtime report the node's network not ready;
 *   - the pod's sandboxes on this node's runtime (ready, stopped, or being created: its ADD has not returned) and
 *     their attachments as `doctor node` judges them.
 * The verdict (diagnose) is pure: the first of these that explains the pod wins.
 */
import { CniError, compareVersions, execDelegate } from '@cnikit/netlib';
import { usedNetwork } from './conf';
import { joinNode, type NodeRow } from './node/join';
import { readNode, type SourceOptions } from './node/sources';

export interface PodFacts {
  namespace: string;
  name: string;
  uid: string;
  nodeName?: string;
  phase?: string;
  ips: string[];
  /** The PodScheduled condition's message when it is False. */
  unschedulable?: string;
  /** Containers waiting, as `name: reason`. */
  waiting: string[];
}

export interface PodEvent {
  type: string;
  reason: string;
  message: string;
  count: number;
  last: string;
}

export interface PluginStatus {
  type: string;
  ok: boolean;
  error?: string;
}

export interface NetworkStatus {
  file?: string;
  network?: string;
  cniVersion?: string;
  plugins: PluginStatus[];
  /** Why STATUS was not asked (no network config, a version without STATUS). */
  note?: string;
}

export interface PodSandbox {
  id: string;
  state: 'ready' | 'creating' | 'stopped';
  row?: NodeRow;
}

export interface PodEvidence {
  pod?: PodFacts;
  events: PodEvent[];
  status: NetworkStatus;
  sandboxes: PodSandbox[];
}

export interface Diagnosis {
  ok: boolean;
  verdict: string;
}

const firstLine = (s: string): string => s.split('\n')[0]!.trim();

/** The one line: the first explanation that holds, from the API server's view to the node's. */
export function diagnose(e: PodEvidence): Diagnosis {
  const p = e.pod;
  if (!p) return { ok: false, verdict: 'no such pod' };
  if (!p.nodeName) return { ok: false, verdict: `not scheduled: ${p.unschedulable ?? 'no node chosen yet'}` };
  const ready = e.sandboxes.find((s) => s.state === 'ready');
  const badRow = ready?.row && ready.row.state !== 'healthy' ? ready.row : undefined;
  if (badRow) return { ok: false, verdict: `its network is ${badRow.state}: ${badRow.problems[0] ?? ''}`.trim() };
  if (ready && p.ips.length) return { ok: true, verdict: `has its network: ${p.ips.join(', ')} (sandbox ${ready.id.slice(0, 13)})` };
  const failing = e.status.plugins.find((x) => !x.ok);
  if (failing) return { ok: false, verdict: `the node's network is not ready: ${failing.type} STATUS fails: ${failing.error}` };
  const creating = e.sandboxes.find((s) => s.state === 'creating');
  if (creating) return { ok: false, verdict: `its sandbox ${creating.id.slice(0, 13)} is being created: the CNI ADD has not returned yet` };
  const failed = [...e.events].reverse().find((x) => x.reason === 'FailedCreatePodSandBox');
  if (failed) return { ok: false, verdict: `the runtime's CNI ADD fails: ${firstLine(failed.message)}` };
  const last = e.events[e.events.length - 1];
  return {
    ok: false,
    verdict: `no network yet, and no CNI error reported${last ? ` (last event: ${last.reason}: ${firstLine(last.message)})` : ''}`,
  };
}

const errorText = (err: unknown): string =>
  err instanceof CniError ? `code ${err.code}: ${err.message}${err.details ? ` (${err.details})` : ''}` : (err as Error).message;

/** STATUS of each plugin of the network the runtime uses, with the plugin's conf as libcni builds it from the list. */
export async function networkStatus(confDir: string, binDirs: string[]): Promise<NetworkStatus> {
  const used = usedNetwork(confDir);
  if (!used) return { plugins: [], note: `no network config the runtime can load in ${confDir}` };
  const base = { file: used.file, network: used.name, cniVersion: used.cniVersion };
  if (!used.cniVersion || compareVersions(used.cniVersion, '1.1.0') < 0)
    return { ...base, plugins: [], note: `cniVersion ${used.cniVersion}: no STATUS before 1.1.0` };
  const plugins: PluginStatus[] = [];
  for (const p of used.plugins) {
    const conf = { ...p, name: used.name, cniVersion: used.cniVersion };
    const type = String(p.type);
    try {
      await execDelegate(type, 'STATUS', Buffer.from(JSON.stringify(conf)), { path: binDirs }, { timeoutMs: 10_000 });
      plugins.push({ type, ok: true });
    } catch (err) {
      plugins.push({ type, ok: false, error: errorText(err) });
    }
  }
  return { ...base, plugins };
}

/** The pod's sandboxes on this node's runtime, each with its `doctor node` row. */
export async function podSandboxes(pod: PodFacts, o: SourceOptions): Promise<PodSandbox[]> {
  const { sources } = await readNode(o);
  const rows = joinNode(sources);
  return sources.sandboxes
    .filter((s) => s.namespace === pod.namespace && s.name === pod.name && (!s.uid || s.uid === pod.uid))
    .map((s) => ({
      id: s.id,
      state: s.ready ? 'ready' : s.creating ? 'creating' : 'stopped',
      row: rows.find((r) => r.containerId === s.id),
    }));
}

export function formatPod(ref: string, e: PodEvidence, d: Diagnosis): string {
  const lines = [`${ref}: ${d.verdict}`];
  if (e.pod) {
    lines.push(`  pod: ${e.pod.phase ?? '?'} on ${e.pod.nodeName ?? '(no node)'}${e.pod.ips.length ? `, ${e.pod.ips.join(', ')}` : ''}`);
    for (const w of e.pod.waiting) lines.push(`  waiting: ${w}`);
  }
  for (const ev of e.events.slice(-5)) lines.push(`  event: ${ev.type} ${ev.reason} (x${ev.count}, ${ev.last}): ${firstLine(ev.message)}`);
  const st = e.status;
  if (st.note) lines.push(`  status: ${st.note}`);
  for (const p of st.plugins) lines.push(`  status: ${st.network}/${p.type}: ${p.ok ? 'ok' : `FAILED ${p.error}`}`);
  if (e.pod?.nodeName && !e.sandboxes.length) lines.push("  sandbox: none of this pod on this node's runtime");
  for (const s of e.sandboxes)
    lines.push(`  sandbox: ${s.id.slice(0, 13)} ${s.state}${s.row ? `, ${s.row.state}: ${s.row.objects.join('; ')}` : ''}`);
  return `${lines.join('\n')}\n`;
}
