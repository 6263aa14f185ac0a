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
import type { IPAllocation, IPPool } from '@cnikit/gcp-ipam/types';
import { GceClient } from '../../packages/gcp-ipam/src/gce';
import { REPO_ROOT } from '../lib/paths';
import { FABRIC_NETNS, importImage, nodeRun, nodeTryRun, routeThroughVpc, type LabNode } from '../../tools/node-lab/lab';
import { run } from '../../tools/node-lab/host';
import { GCP, GKE_CONFLIST, gcpDeployYaml, startGceEmulator, writeGkeConflist, type Emulator } from '../../tools/node-lab/gcp';
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
  runningPodOf,
  startNodes,
  statusOn,
  stopNodes,
  TEST_CONTAINER,
  type NodeEnv,
  type PodInfo,
} from './lib';
import { deleteApp, deploymentYaml, runningApp } from './coil-lib';

const CONFIG = path.join(REPO_ROOT, 'packages', 'gcp-ipam', 'config');
const { zone: ZONE, pool: POOL } = GCP;
let env: NodeEnv | undefined;
let emulator: Emulator | undefined;
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

/** The image's own doctor (its one executable, as built beside the image), run on a node as `kubectl exec` would. */
const DOCTOR = [path.join(REPO_ROOT, 'dist', 'images', 'bin', 'cnikit-gcp-ipam'), 'doctor'];

interface DoctorRow {
  containerId: string;
  pod?: string;
  state: string;
  objects: string[];
}

function doctorNode(node: LabNode, extra: string[] = []): { ok: boolean; rows: DoctorRow[]; out: Record<string, unknown> } {
  const r = nodeTryRun(node, [...DOCTOR, 'node', '-o', 'json', '--cri-socket', node.containerdSocket, ...extra]);
  if (!r.stdout) throw new Error(`doctor node on ${node.name} printed nothing: ${r.out}`);
  const out = JSON.parse(r.stdout) as { attachments?: DoctorRow[]; after?: DoctorRow[] } & Record<string, unknown>;
  return { ok: r.ok, rows: out.attachments ?? [], out };
}

/** An attachment the runtime never knew of: gcp-ipam's ADD run by hand on the node (as a crashed runtime leaves one). */
function plantLeak(node: LabNode, containerId: string): string {
  const list = JSON.parse(nodeRun(node, ['cat', `/etc/cni/net.d/${GKE_CONFLIST}`])) as {
    cniVersion: string;
    name: string;
    plugins: object[];
  };
  const file = path.join(node.dir, 'planted.json');
  fs.writeFileSync(file, JSON.stringify({ cniVersion: list.cniVersion, name: list.name, ...list.plugins[0] }));
  const env = `CNI_COMMAND=ADD CNI_CONTAINERID=${containerId} CNI_NETNS=/var/run/netns/none CNI_IFNAME=eth0 CNI_PATH=/opt/cni/bin CNI_ARGS='K8S_POD_NAMESPACE=default;K8S_POD_NAME=ghost'`;
  const out = JSON.parse(nodeRun(node, ['sh', '-c', `${env} /opt/cni/bin/gcp-ipam < ${file}`])) as { ips: { address: string }[] };
  return out.ips[0]!.address.split('/')[0]!;
}

function plainPod(name: string, node: string, annotations: Record<string, string> = {}): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', labels: { app: 'gcp-single' }, annotations },
    spec: { nodeSelector: { 'kubernetes.io/hostname': node }, terminationGracePeriodSeconds: 1, containers: [TEST_CONTAINER] },
  });
}

const runningPod = (name: string): Promise<PodInfo> => runningPodOf(e(), 'app=gcp-single', name);

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
    emulator = await startGceEmulator(env.lab, REPO_ROOT, 500);
    gceUrl = emulator.url;
    for (const node of env.lab.nodes) writeGkeConflist(node);
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
    await k(e(), ['apply', '-f', '-'], gcpDeployYaml(REPO_ROOT, gceUrl));
    await k(e(), ['-n', 'kube-system', 'wait', '--for=condition=Complete', 'job/gcp-ipam-provisioner', '--timeout=180s']);
    const pool = await kjson<IPPool>(e(), ['get', 'ippool', POOL]);
    expect(pool.spec.secondaryRangeName).toBe('live');
    poolCidr = pool.spec.cidr;
    expect(poolCidr).toMatch(/^10\.\d+\.0\.0\/16$/);
    routeThroughVpc(e().lab, poolCidr);

    await k(e(), ['-n', 'kube-system', 'rollout', 'status', 'daemonset/gcp-ipam-installer', '--timeout=180s']);
    for (const node of e().lab.nodes) {
      const list = await eventually(`${node.name}'s conflist rewritten`, async () => {
        const l = JSON.parse(nodeRun(node, ['cat', `/etc/cni/net.d/${GKE_CONFLIST}`])) as {
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
    // STATUS tells the truth on that node: ADDs cannot succeed there until the quota refills
    expect(statusOn(e().lab.nodes[0]!, GKE_CONFLIST, 'gcp-ipam')).toMatchObject({
      ok: false,
      error: { code: 50, msg: 'gcp-ipam: GCE rate limit exceeded, try again' },
    });
    expect(statusOn(e().lab.nodes[1]!, GKE_CONFLIST, 'gcp-ipam')).toEqual({ ok: true });
    expect((await podsIn(e(), 'default', 'app=gcp-t')).every((p) => p.phase === 'Pending')).toBe(true);
    // nothing is left of the refused attempts: no allocation, no alias
    expect(await allocations()).toEqual([]);
    expect((await aliases())['kl-a']).toEqual([]);
    await control('PUT', 'config', { quotas: { default: 1500 } });
    const pods = await runningApp(e(), 'gcp-t', 2, 360_000);
    await expectAliasesAreThePods(pods);
    expect(statusOn(e().lab.nodes[0]!, GKE_CONFLIST, 'gcp-ipam')).toEqual({ ok: true });
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

  test('a leak planted by hand: doctor cluster names the allocation, doctor node the attachment; --gc --apply frees address and alias, the live pod keeps its own', async () => {
    const [a] = e().lab.nodes;
    await k(e(), ['apply', '-f', '-'], plainPod('keeper', a!.name));
    const keeper = await runningPod('keeper');
    const leaked = plantLeak(a!, 'planted0123456789');
    expect(await aliases()).toMatchObject({ [a!.name]: [keeper.ip, leaked].sort() });
    // across the cluster: an allocation whose pod does not exist
    const cluster = nodeTryRun(a!, [...DOCTOR, 'cluster', '-o', 'json', '--kubeconfig', e().cluster.kubeconfig]);
    const report = JSON.parse(cluster.stdout) as { leakedAllocations: { ip: string; node: string }[] };
    expect(cluster.ok).toBe(false);
    expect(report.leakedAllocations).toEqual([expect.objectContaining({ ip: leaked, node: a!.name })]);
    // on the node: gcp-ipam's record of a sandbox the runtime does not know
    const before = doctorNode(a!);
    expect(before.ok).toBe(false);
    expect(before.rows.filter((r) => r.state !== 'healthy')).toEqual([
      expect.objectContaining({
        containerId: 'planted0123456789',
        state: 'leaked',
        objects: [expect.stringMatching(`^gcp-ipam k8s-pod-network ${leaked} `)],
      }),
    ]);
    const gc = doctorNode(a!, ['--gc', '--apply']);
    expect(JSON.stringify(gc.out.steps)).toMatch(/gcp-ipam \(the ipam of ptp\)/);
    expect(doctorNode(a!).rows.filter((r) => r.state !== 'healthy')).toEqual([]);
    expect(await aliases()).toMatchObject({ [a!.name]: [keeper.ip] });
    expect((await allocations()).map((x) => x.spec.ip)).toEqual([keeper.ip]);
    expect((await runningPod('keeper')).ip).toBe(keeper.ip);
    await k(e(), ['delete', 'pod', 'keeper', '--wait=true']);
    await expectAliasesAreThePods([]);
  });

  test("--cloud joins the VM's aliases: one freed behind the runtime's back breaks its pod, one no pod holds is the cloud's leak", async () => {
    const [a] = e().lab.nodes;
    await k(e(), ['apply', '-f', '-'], plainPod('keeper', a!.name));
    const keeper = await runningPod('keeper');
    const cloud = (): DoctorRow[] => doctorNode(a!, ['--cloud']).rows.filter((r) => r.state !== 'healthy');
    expect(cloud()).toEqual([]);
    const gce = new GceClient({ project: GCP.project, endpoint: `${gceUrl}/compute/v1` });
    try {
      const stray = `${poolCidr.split('.').slice(0, 2).join('.')}.200.200`;
      // as someone with the project's credentials would: an alias added by hand, and the pod's own taken away
      await gce.updateAliases(ZONE, a!.name, 'nic0', (cur) => [
        ...cur.filter((x) => x.ipCidrRange !== `${keeper.ip}/32`),
        { ipCidrRange: `${stray}/32` },
      ]);
      expect(cloud()).toEqual([
        expect.objectContaining({
          pod: 'default/keeper',
          state: 'broken',
          problems: [expect.stringContaining(`${keeper.ip} is no alias of ${a!.name}`)],
        }),
        expect.objectContaining({ containerId: `gcp-alias:${stray}`, state: 'leaked', objects: [`gcp-alias ${stray}/32`] }),
      ]);
      // without --cloud the node alone looks healthy: the cloud is asked only when asked for
      expect(doctorNode(a!).rows.filter((r) => r.state !== 'healthy')).toEqual([]);
      await gce.updateAliases(ZONE, a!.name, 'nic0', () => [{ ipCidrRange: `${keeper.ip}/32` }]);
      expect(cloud()).toEqual([]);
    } finally {
      gce.close();
    }
    await k(e(), ['delete', 'pod', 'keeper', '--wait=true']);
    await expectAliasesAreThePods([]);
    await eventually('no allocation left', async () => (await allocations()).length === 0);
    for (const node of e().lab.nodes) await backToSnapshot(node);
  });
});
