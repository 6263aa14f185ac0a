/**
 * gcp-ipam on two real nodes, installed as a user installs it on GKE: `npm run images -- gcp-ipam` (imported into
 * each node's containerd), then `kubectl apply -f` of packages/gcp-ipam/config/{crds,rbac,deploy}.yaml with the
 * ConfigMap pointed at the GCE emulator (`npm run gce-emulator`, the program users run, listening on the lab's
 * host leg). The nodes start with the conflist GKE writes (Debian's ptp + host-local over the node's range); the
 * installer DaemonSet rewrites its ipam. The emulator's alias hooks play the VPC: the fabric's router sends each
 * alias to the VM holding it (tools/node-lab routeThroughVpc), so a pod's address reaches it on whichever node
 * it lives, and follows it when it migrates. Everything is checked against the emulator's own state.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { dump, loadAll } from 'js-yaml';
import { startListening } from '@cnikit/netlib-testing';
import type { IPAllocation, IPPool } from '@cnikit/gcp-ipam/types';
import { REPO_ROOT } from '../lib/paths';
import {
  FABRIC_NETNS,
  HOST_IP,
  importImage,
  nodeRun,
  routeThroughVpc,
  vpcAliasHooks,
  writeFileAtomic,
  type LabNode,
} from '../../tools/node-lab/lab';
import { run } from '../../tools/node-lab/host';
import {
  buildImages,
  describeNodes,
  eventually,
  k,
  kjson,
  nodeNetState,
  nodePrerequisites,
  ping,
  podsIn,
  readyCondition,
  startNodes,
  stopNodes,
  TEST_CONTAINER,
  type NodeEnv,
  type PodInfo,
} from './lib';
import { deleteApp, deploymentYaml, runningApp } from './coil-lib';

const CONFIG = path.join(REPO_ROOT, 'packages', 'gcp-ipam', 'config');
const PROJECT = 'lab-project';
const REGION = 'europe-west1';
const ZONE = `${REGION}-b`;
const POOL = 'ippool-default';
let env: NodeEnv | undefined;
let emulator: Awaited<ReturnType<typeof startListening>> | undefined;
let gceUrl = '';
let poolCidr = '';
const e = (): NodeEnv => env!;

interface EmulatorState {
  instances: { name: string; networkInterfaces: { networkIP: string; aliasIpRanges: { ipCidrRange: string }[] }[] }[];
  calls: Record<string, number>;
  hookErrors: string[];
}

async function control<T = EmulatorState>(method: string, p: string, body?: unknown): Promise<T> {
  const res = await fetch(`${gceUrl}/_emulator/${p}`, { method, body: body === undefined ? undefined : JSON.stringify(body) });
  if (!res.ok) throw new Error(`emulator ${method} ${p}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

/** instance -> its alias addresses (without /32), from the emulator's state. */
async function aliases(): Promise<Record<string, string[]>> {
  const s = await control('GET', 'state');
  return Object.fromEntries(
    s.instances.map((i) => [i.name, i.networkInterfaces[0]!.aliasIpRanges.map((a) => a.ipCidrRange.replace(/\/32$/, '')).sort()]),
  );
}

/** The VPC's routes (the fabric router's table): alias -> the VM address it is sent to. */
function vpcRoutes(): Record<string, string> {
  const routes = JSON.parse(run('ip', ['-n', FABRIC_NETNS, '-j', 'route', 'show'])) as { dst: string; gateway?: string }[];
  return Object.fromEntries(routes.filter((r) => r.gateway).map((r) => [r.dst, r.gateway!]));
}

/** The conflist GKE writes on a node before any add-on: ptp + host-local over the node's range, portmap. */
function gkeConflist(node: LabNode): void {
  for (const p of ['ptp', 'host-local', 'portmap']) {
    fs.copyFileSync(`/usr/lib/cni/${p}`, path.join(node.cniBinDir, `.${p}.tmp`));
    fs.chmodSync(path.join(node.cniBinDir, `.${p}.tmp`), 0o755);
    fs.renameSync(path.join(node.cniBinDir, `.${p}.tmp`), path.join(node.cniBinDir, p));
  }
  const list = {
    cniVersion: '1.0.0', // what Debian's ptp speaks
    name: 'k8s-pod-network',
    plugins: [
      {
        type: 'ptp',
        mtu: 1460,
        ipMasq: false,
        ipam: { type: 'host-local', ranges: [[{ subnet: node.podSubnet }]], routes: [{ dst: '0.0.0.0/0' }] },
      },
      { type: 'portmap', capabilities: { portMappings: true } },
    ],
  };
  writeFileAtomic(path.join(node.cniConfDir, '10-containerd-net.conflist'), JSON.stringify(list, null, 2));
}

/** deploy.yaml with its ConfigMap set as a user sets it, here for the emulator. */
function deployYaml(): string {
  const docs = loadAll(fs.readFileSync(path.join(CONFIG, 'deploy.yaml'), 'utf8')) as { kind: string; data?: Record<string, string> }[];
  const cm = docs.find((d) => d.kind === 'ConfigMap')!;
  cm.data = {
    project: PROJECT,
    region: REGION,
    subnet: 'default',
    'compute-endpoint': `${gceUrl}/compute/v1`,
    'network-connectivity-endpoint': `${gceUrl}/v1`,
    'metadata-endpoint': gceUrl,
    'ipam.json': JSON.stringify({
      pool: POOL,
      project: PROJECT,
      zone: ZONE,
      computeEndpoint: `${gceUrl}/compute/v1`,
      metadataEndpoint: gceUrl,
      auth: 'metadata', // the token path a VM takes, from the emulated metadata server
    }),
  };
  return docs.map((d) => dump(d)).join('---\n');
}

async function allocations(): Promise<IPAllocation[]> {
  return (await kjson<{ items: IPAllocation[] }>(e(), ['get', 'ipallocations'])).items;
}

async function poolStatus(): Promise<NonNullable<IPPool['status']>> {
  return (await kjson<IPPool>(e(), ['get', 'ippool', POOL])).status ?? {};
}

const inPool = (ip: string): boolean => ip.startsWith(poolCidr.split('.').slice(0, 2).join('.') + '.');

/** Every running pod's address is an alias of its node's VM, and the VM holds no other. */
async function expectAliasesAreThePods(pods: PodInfo[]): Promise<void> {
  await eventually('aliases = the pods', async () => {
    const got = await aliases();
    const want: Record<string, string[]> = {};
    for (const node of e().lab.nodes)
      want[node.name] = pods
        .filter((p) => p.node === node.name)
        .map((p) => p.ip)
        .sort();
    if (JSON.stringify(got) === JSON.stringify(want)) return true;
    throw new Error(`emulator ${JSON.stringify(got)}, pods ${JSON.stringify(want)}`);
  });
}

function plainPod(name: string, node: string, annotations: Record<string, string> = {}): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', labels: { app: 'gcp-single' }, annotations },
    spec: { nodeSelector: { 'kubernetes.io/hostname': node }, terminationGracePeriodSeconds: 1, containers: [TEST_CONTAINER] },
  });
}

async function runningPod(name: string): Promise<PodInfo> {
  return eventually(`${name} Running`, async () => {
    const p = (await podsIn(e(), 'default', 'app=gcp-single')).find((x) => x.name === name);
    if (p?.phase === 'Running' && p.ip) return p;
    throw new Error(`${name}: ${p ? `${p.phase} ${p.ip}` : 'absent'}`);
  });
}

/** Each node's links, routes and rules once gcp-ipam is installed, and the wait until a node is back to them. */
const snapshots = new Map<string, ReturnType<typeof nodeNetState>>();
async function backToSnapshot(node: LabNode): Promise<void> {
  await eventually(`${node.name} back to its snapshot`, async () => {
    const now = nodeNetState(node);
    const was = snapshots.get(node.name)!;
    if (JSON.stringify(now) === JSON.stringify(was)) return true;
    const diff = (a: string[], b: string[]): string[] => [
      ...a.filter((x) => !b.includes(x)).map((x) => `+${x}`),
      ...b.filter((x) => !a.includes(x)).map((x) => `-${x}`),
    ];
    throw new Error([...diff(now.links, was.links), ...diff(now.routes, was.routes), ...diff(now.rules, was.rules)].join('; '));
  });
}

describeNodes('node: gcp-ipam from its image and manifests on two real nodes, against the GCE emulator', nodePrerequisites(), () => {
  beforeAll(async () => {
    const images = buildImages(['gcp-ipam']);
    env = await startNodes(2, 'none');
    importImage(env.lab, images['gcp-ipam']!);
    const hooks = vpcAliasHooks();
    const instances = env.lab.nodes.flatMap((n) => ['--instance', `${ZONE}/${n.name}=${n.ip}`]);
    emulator = await startListening([
      process.execPath,
      path.join(REPO_ROOT, 'tools', 'emulators', 'run.mjs'),
      'gce-emulator',
      ...['--listen', `${HOST_IP}:0`, '--project', PROJECT, '--op-duration-ms', '500'],
      ...['--subnet', `${REGION}/default=198.51.100.0/24`, ...instances],
      ...['--on-alias-add', hooks.add, '--on-alias-remove', hooks.remove],
    ]);
    gceUrl = emulator.line;
    for (const node of env.lab.nodes) gkeConflist(node);
  }, 3_600_000);

  afterAll(async () => {
    await emulator?.stop();
    await stopNodes(env);
    env = undefined;
  }, 240_000);

  test('kubectl apply of the manifests: the provisioner makes the pool, the installer rewrites each node, the controller runs', async () => {
    for (const node of e().lab.nodes)
      await eventually(
        `${node.name} Ready on GKE's conflist`,
        async () => (await readyCondition(e(), node.name))?.status === 'True',
        240_000,
      );
    await k(e(), ['apply', '-f', path.join(CONFIG, 'crds.yaml'), '-f', path.join(CONFIG, 'rbac.yaml')]);
    await k(e(), ['apply', '-f', '-'], deployYaml());
    await k(e(), ['-n', 'kube-system', 'wait', '--for=condition=Complete', 'job/gcp-ipam-provisioner', '--timeout=180s']);
    const pool = await kjson<IPPool>(e(), ['get', 'ippool', POOL]);
    expect(pool.spec.secondaryRangeName).toBe('live');
    poolCidr = pool.spec.cidr;
    expect(poolCidr).toMatch(/^10\.\d+\.0\.0\/16$/);
    routeThroughVpc(e().lab, poolCidr);

    await k(e(), ['-n', 'kube-system', 'rollout', 'status', 'daemonset/gcp-ipam-installer', '--timeout=180s']);
    for (const node of e().lab.nodes) {
      const list = await eventually(`${node.name}'s conflist rewritten`, async () => {
        const l = JSON.parse(nodeRun(node, ['cat', '/etc/cni/net.d/10-containerd-net.conflist'])) as {
          plugins: { type: string; ipam?: Record<string, unknown> }[];
        };
        return l.plugins[0]!.ipam?.type === 'gcp-ipam' ? l : undefined;
      });
      // the node's own name and the kubeconfig the installer wrote from its service account, both host paths
      expect(list.plugins[0]!.ipam).toMatchObject({ type: 'gcp-ipam', pool: POOL, zone: ZONE, nodeName: node.name });
      const kubeconfig = String(list.plugins[0]!.ipam!.kubeconfig);
      expect(kubeconfig).toMatch(/^\/etc\/cni\/net\.d\//);
      expect(nodeRun(node, ['cat', kubeconfig])).toMatch(/https:\/\/10\.0\.0\.1:443/);
      // GKE's original kept beside it; the plugin installed as a link-free copy of the image's executable
      expect(nodeRun(node, ['ls', '/etc/cni/net.d'])).toMatch(/10-containerd-net\.conflist\.gcp-ipam\.bak/);
      expect(nodeRun(node, ['env', 'CNI_COMMAND=VERSION', '/opt/cni/bin/gcp-ipam'])).toMatch(/"supportedVersions"/);
    }
    await k(e(), ['-n', 'kube-system', 'rollout', 'status', 'deployment/gcp-ipam-controller', '--timeout=180s']);
    // a /16 less its network, gateway and broadcast addresses
    await eventually('the pool status filled', async () => (await poolStatus()).capacity === 65533);
    for (const node of e().lab.nodes) snapshots.set(node.name, nodeNetState(node));
  });

  let app: PodInfo[] = [];
  test('pods on both nodes get pool addresses as aliases of their VM, reach each other through the VPC, and the pool counts them', async () => {
    await k(e(), ['apply', '-f', '-'], deploymentYaml('gcp-a', 3, 'kl-a'));
    await k(e(), ['apply', '-f', '-'], deploymentYaml('gcp-b', 3, 'kl-b'));
    app = [...(await runningApp(e(), 'gcp-a', 3)), ...(await runningApp(e(), 'gcp-b', 3))];
    expect(app.every((p) => inPool(p.ip))).toBe(true);
    expect(new Set(app.map((p) => p.ip)).size).toBe(6);
    await expectAliasesAreThePods(app);
    // one IPAllocation per pod, labelled with its node
    const allocs = await allocations();
    expect(allocs.map((a) => a.spec.ip).sort()).toEqual(app.map((p) => p.ip).sort());
    for (const a of allocs) {
      const ip = a.spec.ip;
      expect(a.metadata.labels?.['ipam.gcp-cni.cast.ai/node']).toBe(app.find((p) => p.ip === ip)!.node);
    }
    // the VPC sends each alias to its VM
    const routes = vpcRoutes();
    for (const p of app) expect(routes[p.ip]).toBe(e().lab.nodes.find((n) => n.name === p.node)!.ip);
    const a = app.find((p) => p.node === 'kl-a')!;
    const b = app.find((p) => p.node === 'kl-b')!;
    expect((await ping(e(), a, b.ip)).code).toBe(0);
    expect((await ping(e(), b, a.ip)).code).toBe(0);
    // the controller keeps the counters current without any GC or provisioner run
    await eventually('pool status counts 6', async () => {
      const s = await poolStatus();
      if (s.allocated === 6 && s.available === 65533 - 6) return true;
      throw new Error(JSON.stringify(s));
    });
    expect((await control('GET', 'state')).hookErrors).toEqual([]);
  });

  test('deleting the pods returns their addresses: allocations, aliases and the VPC routes go, the counters drop', async () => {
    await deleteApp(e(), 'gcp-a');
    await deleteApp(e(), 'gcp-b');
    await eventually('no allocation left', async () => (await allocations()).length === 0);
    await expectAliasesAreThePods([]);
    await eventually('no VPC route left', async () => Object.keys(vpcRoutes()).length === 0);
    await eventually('pool status counts 0', async () => (await poolStatus()).allocated === 0);
    for (const node of e().lab.nodes) await backToSnapshot(node);
  });

  test("a throttled cloud: pods wait with an event naming GCE's refusal, then start when the quota comes back", async () => {
    await control('PUT', 'config', { quotas: { default: 0 } });
    await k(e(), ['apply', '-f', '-'], deploymentYaml('gcp-t', 2, 'kl-a'));
    const event = await eventually(
      'a sandbox failure naming the rate limit',
      async () => {
        const ev = await kjson(e(), ['get', 'events', '--field-selector', 'reason=FailedCreatePodSandBox']);
        return ev.items.map((x) => String((x as { message?: string }).message)).find((m) => /gcp-ipam/.test(m) && /rate ?limit/i.test(m));
      },
      240_000,
    );
    expect(event).toMatch(/rateLimitExceeded|Rate Limit Exceeded/);
    expect((await podsIn(e(), 'default', 'app=gcp-t')).every((p) => p.phase === 'Pending')).toBe(true);
    // nothing is left of the refused attempts: no allocation, no alias
    expect(await allocations()).toEqual([]);
    expect((await aliases())['kl-a']).toEqual([]);
    await control('PUT', 'config', { quotas: { default: 1500 } });
    const pods = await runningApp(e(), 'gcp-t', 2, 360_000);
    await expectAliasesAreThePods(pods);
    expect((await allocations()).length).toBe(2);
    await deleteApp(e(), 'gcp-t');
    await expectAliasesAreThePods([]);
    expect(await allocations()).toEqual([]);
  });

  test("a pod's address migrates live to the other node: same IP, the alias and the VPC route follow it", async () => {
    await k(e(), ['apply', '-f', '-'], plainPod('pinger', 'kl-a'));
    await k(e(), ['apply', '-f', '-'], plainPod('mover', 'kl-a'));
    const pinger = await runningPod('pinger');
    const before = await runningPod('mover');
    expect(vpcRoutes()[before.ip]).toBe(e().lab.nodes[0]!.ip);
    // the source lets the address go; its DEL keeps IP and alias for the destination
    await k(e(), ['annotate', 'pod', 'mover', `live.cast.ai/move-out-ip=${before.ip}`]);
    await k(e(), ['delete', 'pod', 'mover', '--wait=true']);
    expect((await aliases())['kl-a']).toEqual([before.ip, pinger.ip].sort());
    await k(
      e(),
      ['apply', '-f', '-'],
      plainPod('mover', 'kl-b', { 'live.cast.ai/ip': before.ip, 'live.cast.ai/original-instance': `${ZONE}/kl-a` }),
    );
    const after = await runningPod('mover');
    expect(after).toMatchObject({ ip: before.ip, node: 'kl-b' });
    expect(await aliases()).toEqual({ 'kl-a': [pinger.ip], 'kl-b': [before.ip] });
    await eventually('the VPC routes the address to kl-b', async () => vpcRoutes()[before.ip] === e().lab.nodes[1]!.ip);
    expect((await ping(e(), pinger, after.ip)).code).toBe(0);
    const alloc = (await allocations()).find((a) => a.spec.ip === before.ip);
    expect(alloc?.spec).toMatchObject({ nodeName: 'kl-b', instance: 'kl-b', phase: 'Allocated' });
    await k(e(), ['delete', 'pod', 'pinger', 'mover', '--wait=true']);
    await expectAliasesAreThePods([]);
    await eventually('no allocation left', async () => (await allocations()).length === 0);
    for (const node of e().lab.nodes) await backToSnapshot(node);
  });
});
