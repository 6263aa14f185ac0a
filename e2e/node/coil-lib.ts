/**
 * Coil on the node tier's nodes, shared by the files that install it: the manifests applied as a user applies
 * them, Deployments of test pods, what the nodes' kernels and the image's own doctor say of them.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { REPO_ROOT } from '../lib/paths';
import { crictl, nodeRun, nodeTryRun, type LabNode } from '../../tools/node-lab/lab';
import { eventually, k, nodeNetState, podsIn, readyCondition, TEST_CONTAINER, type NodeEnv, type PodInfo } from './lib';

export const COIL_CONFIG = path.join(REPO_ROOT, 'packages', 'coil', 'config');
export const POOL = '10.100.0.0/16';
export const inPool = (ip: string): boolean => /^10\.100\.\d+\.\d+$/.test(ip);

/** The image's own doctor, as cni-install left it in the node's bin dir (what `kubectl exec` into coild would run). */
export const DOCTOR = ['/opt/cni/bin/cnikit-coil', 'doctor'];

const poolYaml = JSON.stringify({
  apiVersion: 'coil.cybozu.com/v2',
  kind: 'AddressPool',
  metadata: { name: 'default' },
  spec: { blockSizeBits: 5, subnets: [{ ipv4: POOL }] },
});

/** kubectl apply of packages/coil/config/{crds,rbac,deploy}.yaml and the default pool; waits for Ready nodes and the controller. */
export async function installCoil(env: NodeEnv): Promise<void> {
  await k(env, ['apply', '-f', path.join(COIL_CONFIG, 'crds.yaml')]);
  await k(env, ['wait', '--for=condition=Established', 'crd/addresspools.coil.cybozu.com', '--timeout=60s']);
  await k(env, ['apply', '-f', path.join(COIL_CONFIG, 'rbac.yaml'), '-f', path.join(COIL_CONFIG, 'deploy.yaml')]);
  await k(env, ['apply', '-f', '-'], poolYaml);
  for (const node of env.lab.nodes)
    await eventually(`${node.name} Ready`, async () => (await readyCondition(env, node.name))?.status === 'True', 240_000);
  await k(env, ['-n', 'kube-system', 'rollout', 'status', 'deployment/coil-ipam-controller', '--timeout=180s']);
}

/** A Deployment of test pods labelled app=<name>, on one node or wherever the scheduler puts them. */
export function deploymentYaml(name: string, replicas: number, node?: string): string {
  return JSON.stringify({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, namespace: 'default' },
    spec: {
      replicas,
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: {
          ...(node ? { nodeSelector: { 'kubernetes.io/hostname': node } } : {}),
          terminationGracePeriodSeconds: 1,
          containers: [TEST_CONTAINER],
        },
      },
    },
  });
}

/** Waits until `count` pods of app=<app> run with an address. */
export async function runningApp(env: NodeEnv, app: string, count: number, timeoutMs = 240_000): Promise<PodInfo[]> {
  return eventually(
    `${count} pods of ${app} Running with an address`,
    async () => {
      const list = await podsIn(env, 'default', `app=${app}`);
      const running = list.filter((p) => p.phase === 'Running' && p.ip);
      if (running.length === count) return running;
      throw new Error(`${running.length}/${count} running: ${list.map((p) => `${p.name} ${p.phase} ${p.node} ${p.ip}`).join('; ')}`);
    },
    timeoutMs,
  );
}

/** Deletes a Deployment and waits until its pods are gone (kubectl's --wait covers only the Deployment itself). */
export async function deleteApp(env: NodeEnv, app: string): Promise<void> {
  await k(env, ['delete', 'deployment', app, '--wait=true']);
  await eventually(`no ${app} pod left`, async () => (await podsIn(env, 'default', `app=${app}`)).length === 0, 240_000);
}

/** What BIRD does on a real network: each node learns the others' blocks (table 119) via their address. */
export function exchangeRoutes(nodes: LabNode[]): void {
  for (const from of nodes) {
    const routes = nodeRun(from, ['ip', '-j', 'route', 'show', 'table', '119']);
    for (const r of JSON.parse(routes || '[]') as { dst: string }[]) {
      for (const to of nodes) if (to !== from) nodeRun(to, ['ip', 'route', 'replace', r.dst, 'via', from.ip, 'proto', '186']);
    }
  }
}

/** The host pid of a running container of a node (through the node's CRI, as crictl shows it). */
export function containerPid(env: NodeEnv, node: LabNode, name: string): number {
  const [id] = crictl(env.lab, node, ['ps', '--name', `^${name}$`, '-q'])
    .trim()
    .split('\n');
  if (!id) throw new Error(`no running ${name} container on ${node.name}`);
  return (JSON.parse(crictl(env.lab, node, ['inspect', '-o', 'json', id])) as { info: { pid: number } }).info.pid;
}

export interface CniCall {
  pid: number;
  /** The plugin as the runtime ran it (argv[0]'s base name: coil, loopback...). */
  plugin: string;
  env: Record<string, string>;
  /** CNI_ARGS split into its key=value pairs. */
  args: Record<string, string>;
}

const keyValues = (pairs: string[]): Record<string, string> =>
  Object.fromEntries(pairs.filter((kv) => kv.includes('=')).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));

/** CNI plugin processes running now on any node, read from /proc (the environment the runtime gave them). */
export function cniCalls(): CniCall[] {
  const calls: CniCall[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let raw: string;
    try {
      raw = fs.readFileSync(`/proc/${entry}/environ`, 'utf8');
    } catch {
      continue; // gone, or a kernel thread
    }
    const env = keyValues(raw.split('\0'));
    if (!env.CNI_COMMAND) continue;
    let argv0: string;
    try {
      argv0 = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0')[0] ?? '';
    } catch {
      continue; // gone meanwhile
    }
    calls.push({ pid: Number(entry), plugin: path.basename(argv0), env, args: keyValues((env.CNI_ARGS ?? '').split(';')) });
  }
  return calls;
}

export interface DoctorRow {
  containerId: string;
  pod?: string;
  sandbox: string;
  state: string;
  objects: string[];
  problems: string[];
}

/** `doctor node -o json` on a node (extra: e.g. --gc --apply; doctor: an image's own, coil's by default); its exit status and output. */
export function doctorNode(
  node: LabNode,
  extra: string[] = [],
  doctor = DOCTOR,
): { ok: boolean; out: { attachments?: DoctorRow[] } & Record<string, unknown> } {
  const r = nodeTryRun(node, [...doctor, 'node', '-o', 'json', '--cri-socket', node.containerdSocket, ...extra]);
  if (!r.stdout) throw new Error(`doctor node on ${node.name} printed nothing: ${r.out}`);
  return { ok: r.ok, out: JSON.parse(r.stdout) as { attachments?: DoctorRow[] } };
}

/** Coil's table 116 exists only while the node has a pod: the scheduler may put both of Coil's own pods on one node. */
const podRoutes = (node: LabNode): string => nodeRun(node, ['sh', '-c', 'ip route show table 116 2>/dev/null || true']);
const lines = (t: string): string[] => t.split('\n').filter(Boolean);

/**
 * Links, Coil pod routes and rules of each node before a test's pods (Coil's own pods, e.g.
 * coil-egress-controller, have some), and the wait until a node is back to them.
 */
export class NodeSnapshots {
  private readonly before = new Map<string, { links: string[]; podRoutes: string; rules: string }>();

  take(nodes: LabNode[]): void {
    for (const node of nodes)
      this.before.set(node.name, { links: nodeNetState(node).links, podRoutes: podRoutes(node), rules: nodeRun(node, ['ip', 'rule']) });
  }

  /** Links the node has that the snapshot did not. */
  newLinks(node: LabNode): string[] {
    const was = this.before.get(node.name)!;
    return nodeNetState(node).links.filter((l) => !was.links.includes(l));
  }

  /** Waits until a node has no link the snapshot did not have, then checks no pod route or rule is left either. */
  async backTo(node: LabNode): Promise<void> {
    const was = this.before.get(node.name)!;
    await eventually(`no new link on ${node.name}`, async () => {
      const live = liveOn(node);
      const extra = this.newLinks(node).filter((l) => !live.links.has(l));
      if (extra.length === 0) return true;
      const owners = live.rows.filter((r) => r.objects.some((o) => extra.some((x) => o.includes(x))));
      throw new Error(`${extra.join(' ')} (doctor node: ${JSON.stringify(owners)})`);
    });
    const live = liveOn(node);
    const wasRoutes = lines(was.podRoutes);
    expect(lines(podRoutes(node)).filter((l) => !wasRoutes.includes(l) && !live.ips.has(l.split(' ')[0]!))).toEqual([]);
    expect(nodeRun(node, ['ip', 'rule'])).toBe(was.rules);
  }
}

/**
 * Host links and addresses of the pods the node runs now, as doctor node sees them: a pod started after the
 * snapshot (one of Coil's own, re-created) holds them, so they are not a leak.
 */
function liveOn(node: LabNode): { links: Set<string>; ips: Set<string>; rows: DoctorRow[] } {
  const r = nodeTryRun(node, [...DOCTOR, 'node', '-o', 'json', '--cri-socket', node.containerdSocket]);
  const rows = r.stdout ? (JSON.parse(r.stdout) as { attachments: DoctorRow[] }).attachments : [];
  const links = new Set<string>();
  const ips = new Set<string>();
  for (const row of rows.filter((x) => x.sandbox === 'ready'))
    for (const [kind, name, , held] of row.objects.map((o) => o.split(' '))) {
      if (kind === 'veth' || kind === 'coil') links.add(name!);
      if (kind === 'coil' && /^\d/.test(held ?? '')) for (const ip of held!.split(',')) ips.add(ip);
    }
  return { links, ips, rows };
}
