/**
 * The node tier's harness: one API server (packages/kube testing cluster) and real nodes of tools/node-lab per
 * test file, driven through kubectl (the v1.37 kubectl the lab builds) as a user would.
 */
import { execFile, execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { eventually as kitEventually, startCluster, stopCluster, type ClusterInfo } from '@cnikit/kube-testing';
import {
  downNodes,
  ensureNodeBinaries,
  labDirOf,
  missingPrerequisites,
  nodeRun,
  nodeTryRun,
  upNodes,
  type Lab,
  type LabNode,
} from '../../tools/node-lab/lab';
import { cnitoolPath, IS_CI, REPO_ROOT } from '../lib/paths';

export interface NodeEnv {
  cluster: ClusterInfo;
  lab: Lab;
}

/**
 * What this file cannot run without: under CI=true the caller fails with the message, elsewhere it skips and
 * says why. The binaries themselves are built (cached) by beforeAll, not counted as missing.
 */
export function nodePrerequisites(extra: string[] = []): string | undefined {
  const missing = [...missingPrerequisites(), ...extra];
  return missing.length ? `node tier needs: ${missing.join(', ')}` : undefined;
}

/** describe, or describe.skip with the reason in the name (and a warning), or a failing test under CI. */
export function describeNodes(name: string, missing: string | undefined, fn: () => void): void {
  if (!missing) {
    describe(name, fn);
  } else if (IS_CI) {
    describe(name, () =>
      test('prerequisites', () => {
        throw new Error(missing);
      }),
    );
  } else {
    console.warn(`[node] skipping "${name}": ${missing}`);
    describe.skip(`${name} (skipped: ${missing})`, fn);
  }
}

const log = (m: string): void => {
  if (process.env.CNIKIT_NODE_VERBOSE) console.log(m);
};

export async function startNodes(nodes: number, cni: 'bridge' | 'none'): Promise<NodeEnv> {
  ensureNodeBinaries(log);
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-node-'));
  const cluster = await startCluster({
    stateDir,
    log,
    serviceAccounts: true,
    apiServerArgs: ['--kubelet-preferred-address-types=InternalIP,Hostname,InternalDNS,ExternalDNS,ExternalIP'],
  });
  try {
    return { cluster, lab: await upNodes({ clusterDir: cluster.stateDir, nodes, cni, log }) };
  } catch (err) {
    await stopCluster(cluster);
    throw err;
  }
}

/** Tears the lab down (returns the leaks), then the API server. Idempotent. */
export async function stopNodes(env: NodeEnv | undefined): Promise<string[]> {
  if (!env) return [];
  // CNIKIT_NODE_LOGS=<dir> keeps the nodes' daemon logs (kubelet, containerd) for a failed run.
  const leaks = await downNodes(labDirOf(env.cluster.stateDir), { log, keepLogs: process.env.CNIKIT_NODE_LOGS });
  await stopCluster(env.cluster);
  return leaks;
}

export interface KubectlResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function kubectl(env: NodeEnv, args: string[], input?: string): Promise<KubectlResult> {
  return new Promise((resolve) => {
    const child = execFile(
      env.lab.bins.kubectl,
      args,
      { env: { ...process.env, KUBECONFIG: env.cluster.kubeconfig }, timeout: 120_000, maxBuffer: 32 << 20 },
      (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }),
    );
    if (input !== undefined) child.stdin!.end(input);
  });
}

/** kubectl that must succeed; returns stdout. */
export async function k(env: NodeEnv, args: string[], input?: string): Promise<string> {
  const r = await kubectl(env, args, input);
  if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')}: exit ${r.code}: ${r.stderr}${r.stdout}`);
  return r.stdout;
}

/** The fields of kubectl's JSON the node tests read. */
export interface KObject {
  metadata: { name: string; annotations?: Record<string, string>; deletionTimestamp?: string };
  spec?: { nodeName?: string };
  status?: {
    phase?: string;
    podIP?: string;
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
    nodeInfo?: { kubeletVersion: string; containerRuntimeVersion: string };
    addresses?: { type: string; address: string }[];
  };
}
export type KList = KObject & { items: KObject[] };

export async function kjson<T = KList>(env: NodeEnv, args: string[]): Promise<T> {
  return JSON.parse(await k(env, [...args, '-o', 'json'])) as T;
}

/** Polls until check returns a truthy value (the kit's helper, with the node tier's longer default). */
export const eventually = <T>(what: string, check: () => Promise<T>, timeoutMs = 120_000): Promise<NonNullable<T>> =>
  kitEventually(what, check, timeoutMs, 300);

export interface NodeCondition {
  status: string;
  reason?: string;
  message?: string;
}

export async function readyCondition(env: NodeEnv, node: string): Promise<NodeCondition | undefined> {
  const n = await kjson(env, ['get', 'node', node]);
  return (n.status?.conditions ?? []).find((c: { type: string }) => c.type === 'Ready');
}

/** The container of every test pod: busybox (no registry), stops at once on SIGTERM (sleep as PID 1 would not). */
export const TEST_CONTAINER = {
  name: 'bb',
  image: 'lab.local/busybox:1.35',
  imagePullPolicy: 'Never',
  command: ['sh', '-c', "trap 'exit 0' TERM; sleep 3600 & wait"],
};

/** A pod that stops at once on SIGTERM (sleep as PID 1 would not) and is placed by the scheduler on `node`. */
export function podYaml(name: string, node: string, labels: Record<string, string> = {}): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { app: 'node-test', ...labels } },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': node },
      terminationGracePeriodSeconds: 1,
      containers: [TEST_CONTAINER],
    },
  });
}

/** One pod per node through the DaemonSet controller and the scheduler. */
export function daemonSetYaml(name: string): string {
  return JSON.stringify({
    apiVersion: 'apps/v1',
    kind: 'DaemonSet',
    metadata: { name },
    spec: {
      selector: { matchLabels: { ds: name } },
      template: {
        metadata: { labels: { ds: name, app: 'node-test' } },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [TEST_CONTAINER],
        },
      },
    },
  });
}

export interface PodInfo {
  name: string;
  node: string;
  ip: string;
  phase: string;
}

export async function pods(env: NodeEnv, selector = 'app=node-test'): Promise<PodInfo[]> {
  return podsIn(env, 'default', selector);
}

/** Waits until `count` pods of the selector run and have an address. */
export async function runningPods(env: NodeEnv, count: number, selector = 'app=node-test'): Promise<PodInfo[]> {
  return eventually(
    `${count} pods Running (${selector})`,
    async () => {
      const list = await pods(env, selector);
      const ready = list.filter((p) => p.phase === 'Running' && p.ip);
      if (ready.length === count) return ready;
      throw new Error(list.map((p) => `${p.name} ${p.phase} ${p.node} ${p.ip}`).join('; ') || 'no pods');
    },
    180_000,
  );
}

/** ping from inside a pod (kubectl exec through the API server to the node's kubelet). */
export async function ping(env: NodeEnv, from: PodInfo, to: string): Promise<KubectlResult> {
  return kubectl(env, ['exec', from.name, '--', 'ping', '-c', '2', '-W', '3', to]);
}

/** Links, routes (all tables), rules and neighbours of a node's network namespace, one per line. */
export function nodeNetState(node: LabNode): { links: string[]; routes: string[]; rules: string[] } {
  const lines = (s: string): string[] =>
    s
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean);
  return {
    links: lines(nodeRun(node, ['ip', '-o', 'link', 'show'])).map((l) => l.split(':')[1].trim().split('@')[0]),
    // without the kernel's own (local table, IPv6 link-local) and link state flags (linkdown)
    routes: lines(nodeRun(node, ['ip', 'route', 'show', 'table', 'all']))
      .filter((l) => !/^(local|broadcast|multicast|anycast) /.test(l) && !/table local/.test(l) && !l.startsWith('fe80::/64 '))
      .map((l) => l.replace(/ linkdown\b/, '')),
    rules: lines(nodeRun(node, ['ip', 'rule'])),
  };
}

/** `npm run images -- <families>`: the OCI archives the manifests' images come from (dist/images/<family>.tar). */
export function buildImages(families: string[]): Record<string, string> {
  const out = execFileSync(process.execPath, [path.join(REPO_ROOT, 'tools', 'images', 'images.mjs'), ...families], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    timeout: 600_000,
  });
  const files: Record<string, string> = {};
  for (const line of out.trim().split('\n')) {
    const [ref, file] = line.split(' ');
    const family = families.find((f) => ref!.includes(`/cnikit/${f}:`));
    if (family && file) files[family] = file;
  }
  for (const f of families) if (!files[f]) throw new Error(`images.mjs built no image for ${f}:\n${out}`);
  return files;
}

/**
 * The image Multus's thin DaemonSet runs (deployments/multus-daemonset.yml, unchanged), written from the programs
 * tools/node-lab/build.sh built from the Multus source (tools/node-lab/multus-image.mjs); cached beside them.
 */
export function multusImage(lab: Lab): string {
  if (!lab.bins.multus) throw new Error('tools/node-lab/build.sh built no multus (is the Multus source there?)');
  const dir = path.dirname(lab.bins.multus);
  const out = execFileSync(
    process.execPath,
    [path.join(REPO_ROOT, 'tools', 'node-lab', 'multus-image.mjs'), dir, path.join(dir, 'multus-cni.tar')],
    {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  return out.trim().split(' ')[1]!;
}

/** Pods of a label selector in a namespace, with their node and address. */
export async function podsIn(env: NodeEnv, namespace: string, selector: string): Promise<PodInfo[]> {
  const list = await kjson(env, ['get', 'pods', '-n', namespace, '-l', selector]);
  return list.items.map((p) => ({
    name: p.metadata.name,
    node: p.spec?.nodeName ?? '',
    ip: p.status?.podIP ?? '',
    phase: p.status?.phase ?? '',
  }));
}

/** Waits until pod `name` (of the default namespace, label selector `selector`) runs with an address. */
export async function runningPodOf(env: NodeEnv, selector: string, name: string): Promise<PodInfo> {
  return eventually(`${name} Running`, async () => {
    const p = (await podsIn(env, 'default', selector)).find((x) => x.name === name);
    if (p?.phase === 'Running' && p.ip) return p;
    throw new Error(`${name}: ${p ? `${p.phase} ${p.ip}` : 'absent'}`);
  });
}

/**
 * STATUS of a node's installed plugin `plugin` as containerd 2.x calls it for a 1.1.0 conflist: the first plugin's
 * config of the node's `conflist` at cniVersion 1.1.0 (for a conflist kept at 1.0.0 for Debian's plugins, the
 * test makes the call containerd would not).
 */
export function statusOn(node: LabNode, conflist: string, plugin: string): { ok: boolean; error?: { code: number; msg: string } } {
  const list = JSON.parse(nodeRun(node, ['cat', `/etc/cni/net.d/${conflist}`])) as { name: string; plugins: object[] };
  const file = path.join(node.dir, 'status.json');
  fs.writeFileSync(file, JSON.stringify({ cniVersion: '1.1.0', name: list.name, ...list.plugins[0] }));
  const r = nodeTryRun(node, ['sh', '-c', `CNI_COMMAND=STATUS CNI_PATH=/opt/cni/bin /opt/cni/bin/${plugin} < ${file}`]);
  return r.ok ? { ok: true } : { ok: false, error: JSON.parse(r.stdout) as { code: number; msg: string } };
}

/**
 * A leak as a pod gone behind the runtime's back leaves it: libcni's own client (cnitool) adds the node's network
 * `network` for pod default/`pod` in a new netns `ns`, which outlives any sandbox (the test deletes it).
 */
export function plantAttachment(node: LabNode, network: string, ns: string, pod: string): void {
  nodeRun(node, ['ip', 'netns', 'add', ns]);
  const env = ['NETCONFPATH=/etc/cni/net.d', 'CNI_PATH=/opt/cni/bin', `CNI_ARGS=K8S_POD_NAMESPACE=default;K8S_POD_NAME=${pod}`];
  nodeRun(node, ['env', ...env, cnitoolPath(), 'add', network, `/run/netns/${ns}`]);
}
