// Shared by the gcp-ipam tests: the API server started by globalSetup, CRDs, pools, pods, a fake GCE, and the
// plugin run in-process through netlib's runPlugin with the env and stdin a runtime would give it.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { runPlugin, type PluginOutput } from '@cnikit/netlib';
import { installCrd, ResourceClient, Pods, Namespaces, isAlreadyExists, type KubeTransport, type Pod } from '@cnikit/kube';
import { testCluster, transportFor, uniqueName } from '@cnikit/kube-testing';
import { crds } from '../src/crds';
import { GceClient } from '../src/gce';
import { add, check, del, gc, status } from '../src/plugin';
import { API_VERSION, type IPAllocation, type IPPool } from '../src/types';
import { FakeGce } from '@cnikit/gce-emulator';

export const cluster = testCluster();
export const kubeconfig = cluster.kubeconfig;
let transport: KubeTransport | undefined;
export function kube(): KubeTransport {
  transport ??= transportFor(cluster);
  return transport;
}
export function closeKube(): void {
  transport?.close();
  transport = undefined;
}

export async function installCrds(): Promise<void> {
  for (const c of crds) await installCrd(kube(), c);
}

/** The hooks every API-server test file starts with: CRDs installed before its first test, the connection closed after its last. */
export function useCrds(): void {
  beforeAll(installCrds);
  afterAll(closeKube);
}

/** Every IPAllocation of `pool`. */
export async function allocations(pool: string): Promise<IPAllocation[]> {
  const list = await kube().request<{ items: IPAllocation[] }>('GET', `/apis/${API_VERSION}/ipallocations`);
  return list.items.filter((a) => a.spec.pool === pool);
}

export const ZONE = 'europe-west1-b';
export const PROJECT = 'test-project';

export async function createPool(cidr: string, name = uniqueName('pool')): Promise<IPPool> {
  return kube().request<IPPool>('POST', `/apis/${API_VERSION}/ippools`, {
    body: {
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name },
      spec: { cidr, subnet: `projects/${PROJECT}/regions/europe-west1/subnetworks/default`, secondaryRangeName: 'live' },
    },
  });
}

export async function ensureNamespace(name: string): Promise<void> {
  try {
    await new ResourceClient(kube(), Namespaces).create({ metadata: { name } });
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
  }
}

export async function createPod(
  namespace: string,
  name: string,
  opts: { annotations?: Record<string, string>; ownerUid?: string } = {},
): Promise<Pod> {
  await ensureNamespace(namespace);
  return new ResourceClient(kube(), Pods, { namespace }).create({
    metadata: {
      name,
      namespace,
      annotations: opts.annotations,
      ownerReferences: opts.ownerUid
        ? [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'rs', uid: opts.ownerUid, controller: true }]
        : undefined,
    },
    spec: { containers: [{ name: 'c', image: 'busybox' }] },
  });
}

export async function annotatePod(namespace: string, name: string, annotations: Record<string, string | null>): Promise<void> {
  await new ResourceClient(kube(), Pods, { namespace }).patch(name, { metadata: { annotations } }, 'merge');
}

export function tmpDir(prefix = 'gcp-ipam-test-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

export interface NodeSetup {
  node: string;
  instance: string;
  stateDir: string;
}

/** A VM `name` in ZONE of `fake`, run as the node of the same name with a state dir of its own. */
export function addNode(fake: FakeGce, name = uniqueName('node')): NodeSetup {
  fake.addInstance(ZONE, name);
  return { node: name, instance: name, stateDir: tmpDir() };
}

/** The network config of the plugin on node `n` allocating from `pool` (CNI 1.1.0). */
export function nodeConf(fake: FakeGce, pool: string, n: NodeSetup): string {
  return netConf(ipamConf(fake, pool, n));
}

export function ipamConf(fake: FakeGce, pool: string, n: NodeSetup, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    type: 'gcp-ipam',
    kubeconfig,
    pool,
    project: PROJECT,
    zone: ZONE,
    instance: n.instance,
    nodeName: n.node,
    computeEndpoint: fake.computeEndpoint,
    auth: 'none',
    stateDir: n.stateDir,
    batchWindowMs: 20,
    ...extra,
  };
}

export function netConf(ipam: Record<string, unknown>, cniVersion = '1.1.0', extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ cniVersion, name: 'gcp-net', type: 'ptp', ipam, ...extra });
}

export interface CallOpts {
  containerId: string;
  ifName?: string;
  pod?: { namespace: string; name: string; uid?: string };
  cniArgs?: string;
}

export function callPlugin(command: string, stdin: string, o: CallOpts): Promise<PluginOutput> {
  const args =
    o.cniArgs !== undefined
      ? o.cniArgs
      : o.pod
        ? `IgnoreUnknown=1;K8S_POD_NAMESPACE=${o.pod.namespace};K8S_POD_NAME=${o.pod.name}${o.pod.uid ? `;K8S_POD_UID=${o.pod.uid}` : ''}`
        : '';
  return runPlugin(
    { add, del, check, gc, status },
    { about: 'gcp-ipam test' },
    {
      env: {
        CNI_COMMAND: command,
        CNI_CONTAINERID: o.containerId,
        CNI_NETNS: command === 'ADD' || command === 'CHECK' ? '/var/run/netns/none' : '',
        CNI_IFNAME: o.ifName ?? 'eth0',
        CNI_PATH: '/opt/cni/bin',
        CNI_ARGS: args,
      },
      stdin,
    },
  );
}

export function parseOut(out: PluginOutput): {
  ips?: { address: string; gateway?: string }[];
  routes?: { dst: string; gw?: string }[];
  code?: number;
  msg?: string;
  details?: string;
} {
  return out.stdout ? JSON.parse(out.stdout) : {};
}

/** A fake GCE with the VMs vm-a and vm-b in ZONE, and a compute client of it (retrying rate limits after `rateLimitBackoffMs`). */
export async function startGce(opDurationMs: number, rateLimitBackoffMs: number): Promise<{ fake: FakeGce; gce: GceClient }> {
  const fake = new FakeGce({ opDurationMs });
  await fake.start();
  fake.addInstance(ZONE, 'vm-a');
  fake.addInstance(ZONE, 'vm-b');
  return { fake, gce: new GceClient({ project: fake.project, endpoint: fake.computeEndpoint, rateLimitBackoffMs }) };
}

export async function stopGce(fake: FakeGce, gce: GceClient): Promise<void> {
  gce.close();
  await fake.stop();
}

export async function newFake(opts: ConstructorParameters<typeof FakeGce>[0] = {}): Promise<FakeGce> {
  const f = new FakeGce({ project: PROJECT, ...opts });
  await f.start();
  return f;
}

export { uniqueName };
