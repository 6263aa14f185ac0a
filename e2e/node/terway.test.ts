/**
 * terway (ENI multi-IP, veth) on two real nodes, installed as a user installs it on ACK: `npm run images -- terway`
 * (imported into each node's containerd), then `kubectl apply -f` of packages/terway/config/{rbac,deploy}.yaml with
 * eni-config pointed at the Alibaba Cloud emulator (`npm run aliyun-emulator`, the program users run, on the lab's
 * host leg). Each node is one of the emulator's instances (tools/node-lab/aliyun.ts): an ENI terwayd attaches
 * appears on the node as a link with the ENI's MAC, and the fabric's router delivers each of its private IPs to it,
 * as the VPC does. Everything is checked against the emulator's own state.
 */
import * as path from 'node:path';
import { REPO_ROOT } from '../lib/paths';
import { crictl, FABRIC_NETNS, importImage, nodeRun, nodeTryRun, type LabNode } from '../../tools/node-lab/lab';
import { run } from '../../tools/node-lab/host';
import { ALIYUN, LAB_POOL, instanceOf, startAliyunEmulator, terwayDeployYaml, type Emulator } from '../../tools/node-lab/aliyun';
import {
  buildImages,
  describeNodes,
  eventually,
  k,
  kjson,
  kubectl,
  nodePrerequisites,
  ping,
  plantAttachment,
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
import { deleteApp, deploymentYaml, doctorNode as doctorNodeOf, runningApp } from './coil-lib';

const CONFIG = path.join(REPO_ROOT, 'packages', 'terway', 'config');
let env: NodeEnv | undefined;
let emulator: Emulator | undefined;
const e = (): NodeEnv => env!;

interface EmulatorEni {
  id: string;
  type: string;
  status: string;
  mac: string;
  primaryIp: string;
  secondaryIps: string[];
  instanceId?: string;
}

async function control<T = { enis: EmulatorEni[]; calls: number }>(method: string, p: string, body?: unknown): Promise<T> {
  const res = await fetch(`http://${emulator!.url}/_emulator/${p}`, {
    method,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`emulator ${method} ${p}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

/** Every private IP of the secondary ENIs the emulator has, by the node whose instance holds the ENI. */
async function cloudIps(): Promise<Record<string, string[]>> {
  const { enis } = await control('GET', 'state');
  const out: Record<string, string[]> = Object.fromEntries(e().lab.nodes.map((n) => [n.name, []]));
  for (const eni of enis.filter((x) => x.type === 'Secondary')) {
    const node = e().lab.nodes.find((n) => instanceOf(n) === eni.instanceId);
    out[node?.name ?? `unattached ${eni.id}`] = [...(out[node?.name ?? ''] ?? []), eni.primaryIp, ...eni.secondaryIps].sort();
  }
  return out;
}

/** The fabric router's neighbours on the pods' vSwitch: address -> MAC (the VPC's delivery). */
function vpcNeighbours(): Record<string, string> {
  const rows = JSON.parse(run('ip', ['-n', FABRIC_NETNS, '-j', 'neigh', 'show', 'dev', 'fab0', 'nud', 'permanent'])) as {
    dst: string;
    lladdr: string;
  }[];
  return Object.fromEntries(rows.filter((r) => r.dst.startsWith('172.20.')).map((r) => [r.dst, r.lladdr]));
}

/** terwayd's leases on a node (its state file, on the node's own /var/lib/cni). */
function leases(node: LabNode): { ip: string; eniId: string }[] {
  const r = nodeTryRun(node, ['cat', '/var/lib/cni/terway/pod.json']);
  return r.ok ? (JSON.parse(r.stdout) as { leases: { ip: string; eniId: string }[] }).leases : [];
}

const inPodVSwitch = (ip: string): boolean => /^172\.20\.0\.\d+$/.test(ip);

/** The image's own doctor (its one executable, as the DaemonSet's init container installed it on the node). */
type DoctorRow = { containerId: string; pod?: string; state: string; objects: string[] };
function doctorNode(node: LabNode, extra: string[] = []): { ok: boolean; rows: DoctorRow[] } {
  const r = nodeTryRun(node, [
    ...['env', `ALIBABA_CLOUD_ACCESS_KEY_ID=${ALIYUN.keys.id}`, `ALIBABA_CLOUD_ACCESS_KEY_SECRET=${ALIYUN.keys.secret}`],
    ...['/opt/cni/bin/cnikit-terway', 'doctor', 'node', '-o', 'json', '--cri-socket', node.containerdSocket],
    ...['--cloud', '--aliyun-metadata', `http://${emulator!.url}`, '--aliyun-endpoint', `http://${emulator!.url}`, ...extra],
  ]);
  if (!r.stdout.startsWith('{')) throw new Error(`doctor node on ${node.name} printed no report: ${r.out}`);
  const out = JSON.parse(r.stdout) as { attachments: DoctorRow[]; unreadable: string[] };
  expect(out.unreadable).toEqual([]);
  return { ok: r.ok, rows: out.attachments };
}

interface GcOut {
  applied: boolean;
  steps: { step: string; network: string; target: string; ok?: boolean }[];
  after: unknown[];
}

/** doctor node --gc with the image's own doctor: exit status and report. */
function doctorGc(node: LabNode, extra: string[] = []): { ok: boolean; out: GcOut } {
  const r = doctorNodeOf(node, ['--gc', ...extra], ['/opt/cni/bin/cnikit-terway', 'doctor']);
  return { ok: r.ok, out: r.out as unknown as GcOut };
}

/** ECS's published limits of the calls that bring addresses (what the lab's emulator starts with). */
const PUBLISHED = { CreateNetworkInterface: { count: 500, windowMs: 60_000 }, AssignPrivateIpAddresses: { count: 400, windowMs: 60_000 } };

function podJson(
  name: string,
  node: string,
  extra: { annotations?: Record<string, string>; eni?: number; command?: string[] } = {},
): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', labels: { app: 'tw-single' }, annotations: extra.annotations ?? {} },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': node },
      terminationGracePeriodSeconds: 1,
      containers: [
        {
          ...TEST_CONTAINER,
          ...(extra.command ? { command: extra.command } : {}),
          ...(extra.eni ? { resources: { limits: { 'aliyun/eni': String(extra.eni) } } } : {}),
        },
      ],
    },
  });
}

/** The host pid of a pod's running container on a node (through the node's CRI, as crictl shows it). */
function podPid(node: LabNode, pod: string): number {
  const [id] = crictl(e().lab, node, ['ps', '--label', `io.kubernetes.pod.name=${pod}`, '-q'])
    .trim()
    .split('\n');
  if (!id) throw new Error(`no running container of ${pod} on ${node.name}`);
  return (JSON.parse(crictl(e().lab, node, ['inspect', '-o', 'json', id])) as { info: { pid: number } }).info.pid;
}

const runningPod = (name: string): Promise<PodInfo> => runningPodOf(e(), 'app=tw-single', name);

/** The pool keeps at most max_pool_size idle IPs per node: the rest goes back to the cloud, its VPC delivery with it. */
async function expectCloudHolds(pods: PodInfo[]): Promise<void> {
  await eventually('the cloud holds the pods and at most the idle pool', async () => {
    const ips = await cloudIps();
    const neigh = vpcNeighbours();
    for (const node of e().lab.nodes) {
      const mine = pods.filter((p) => p.node === node.name).map((p) => p.ip);
      const held = ips[node.name] ?? [];
      if (!mine.every((ip) => held.includes(ip)) || held.length > mine.length + LAB_POOL.max_pool_size)
        throw new Error(`${node.name}: cloud ${held.join(',')}, pods ${mine.join(',')}`);
    }
    const all = Object.values(ips).flat().sort();
    if (Object.keys(ips).some((n) => n.startsWith('unattached'))) throw new Error(`ENIs left unattached: ${JSON.stringify(ips)}`);
    if (JSON.stringify(Object.keys(neigh).sort()) !== JSON.stringify(all))
      throw new Error(`VPC delivers ${Object.keys(neigh).sort().join(',')}, cloud has ${all.join(',')}`);
    return true;
  });
}

describeNodes(
  'node: terway from its image and manifests on two real nodes, against the Alibaba Cloud emulator',
  nodePrerequisites(),
  () => {
    beforeAll(async () => {
      const images = buildImages(['terway']);
      env = await startNodes(2, 'none');
      importImage(env.lab, images.terway!);
      emulator = await startAliyunEmulator(env.lab, REPO_ROOT);
    }, 3_600_000);

    afterAll(async () => {
      await emulator?.stop();
      await stopNodes(env);
      env = undefined;
    }, 240_000);

    test('kubectl apply of the manifests: terwayd on each node, the conflist installed, Nodes Ready, aliyun/eni in their allocatable', async () => {
      await k(e(), ['apply', '-f', path.join(CONFIG, 'rbac.yaml')]);
      await k(e(), ['apply', '-f', '-'], terwayDeployYaml(REPO_ROOT, emulator!.url));
      await k(e(), ['-n', 'kube-system', 'rollout', 'status', 'daemonset/terway', '--timeout=240s']);
      for (const node of e().lab.nodes) {
        // containerd runs terway's STATUS (cniVersion 1.1.0): Ready once terwayd answers on the node
        await eventually(`${node.name} Ready`, async () => (await readyCondition(e(), node.name))?.status === 'True', 240_000);
        expect(JSON.parse(nodeRun(node, ['cat', '/etc/cni/net.d/10-terway.conflist']))).toMatchObject({
          cniVersion: '1.1.0',
          plugins: [{ type: 'terway' }],
        });
        // the instance type's EniQuantity less the primary ENI, registered by terwayd's device plugin with the kubelet
        const alloc = await eventually(`aliyun/eni on ${node.name}`, async () => {
          const n = await kjson<{ status: { allocatable: Record<string, string> } }>(e(), ['get', 'node', node.name]);
          return n.status.allocatable['aliyun/eni'];
        });
        expect(alloc).toBe('2');
      }
      // min_pool_size 0: nothing is taken from the cloud before the first pod
      expect(await cloudIps()).toEqual(Object.fromEntries(e().lab.nodes.map((n) => [n.name, []])));
    });

    let app: PodInfo[] = [];
    test("pods on both nodes get secondary IPs of their own node's ENIs, and reach each other through the VPC", async () => {
      await k(e(), ['apply', '-f', '-'], deploymentYaml('tw-a', 3, 'kl-a'));
      await k(e(), ['apply', '-f', '-'], deploymentYaml('tw-b', 3, 'kl-b'));
      app = [...(await runningApp(e(), 'tw-a', 3)), ...(await runningApp(e(), 'tw-b', 3))];
      expect(app.every((p) => inPodVSwitch(p.ip))).toBe(true);
      expect(new Set(app.map((p) => p.ip)).size).toBe(6);
      const ips = await cloudIps();
      for (const p of app) expect(ips[p.node]).toContain(p.ip);
      for (const node of e().lab.nodes) {
        expect(
          leases(node)
            .map((l) => l.ip)
            .sort(),
        ).toEqual(
          app
            .filter((p) => p.node === node.name)
            .map((p) => p.ip)
            .sort(),
        );
        // the ENI is a link of the node, with its MAC, up
        const { enis } = await control('GET', 'state');
        for (const eni of enis.filter((x) => x.instanceId === instanceOf(node) && x.type === 'Secondary'))
          expect(nodeRun(node, ['ip', '-o', 'link', 'show'])).toMatch(new RegExp(`state UP .*link/ether ${eni.mac}`));
      }
      await expectCloudHolds(app);
      const a = app.find((p) => p.node === 'kl-a')!;
      const b = app.find((p) => p.node === 'kl-b')!;
      expect((await ping(e(), a, b.ip)).code).toBe(0);
      expect((await ping(e(), b, a.ip)).code).toBe(0);
      // doctor joins the runtime, terwayd's leases, the kernel and ECS: every attachment healthy
      for (const node of e().lab.nodes) {
        const d = doctorNode(node);
        expect(d.rows.filter((r) => r.state !== 'healthy')).toEqual([]);
        expect(d.rows.filter((r) => r.pod?.startsWith('default/tw-')).length).toBe(3);
      }
    });

    test('a pod asking for aliyun/eni is scheduled within the ENI slots; one asking for more than a node has waits, Insufficient aliyun/eni', async () => {
      await k(e(), ['apply', '-f', '-'], podJson('eni-one', 'kl-a', { eni: 1 }));
      await k(e(), ['apply', '-f', '-'], podJson('eni-three', 'kl-a', { eni: 3 }));
      expect(inPodVSwitch((await runningPod('eni-one')).ip)).toBe(true);
      const why = await eventually('FailedScheduling for eni-three', async () => {
        const ev = await kjson(e(), ['get', 'events', '--field-selector', 'involvedObject.name=eni-three,reason=FailedScheduling']);
        return ev.items.map((x) => String((x as { message?: string }).message)).find((m) => /Insufficient aliyun\/eni/.test(m));
      });
      expect(why).toMatch(/Insufficient aliyun\/eni/);
      expect((await podsIn(e(), 'default', 'app=tw-single')).find((p) => p.name === 'eni-three')?.phase).toBe('Pending');
      await k(e(), ['delete', 'pod', 'eni-one', 'eni-three', '--wait=true']);
    });

    test('bandwidth annotations shape real traffic: a download from a pod limited to 8 Mbit/s out, and into a pod limited to 8 Mbit/s in', async () => {
      const serve = ['sh', '-c', 'dd if=/dev/zero of=/tmp/blob bs=1024 count=4096 2>/dev/null && exec httpd -f -p 8080 -h /tmp'];
      await k(
        e(),
        ['apply', '-f', '-'],
        podJson('bw-server', 'kl-a', { command: serve, annotations: { 'k8s.aliyun.com/egress-bandwidth': '8M' } }),
      );
      await k(e(), ['apply', '-f', '-'], podJson('bw-free', 'kl-a', { command: serve }));
      await k(e(), ['apply', '-f', '-'], podJson('bw-client', 'kl-b', { annotations: { 'k8s.aliyun.com/ingress-bandwidth': '8M' } }));
      await k(e(), ['apply', '-f', '-'], podJson('bw-plain', 'kl-b'));
      const [limitedOut, free, limitedIn, plain] = await Promise.all(['bw-server', 'bw-free', 'bw-client', 'bw-plain'].map(runningPod));
      const bits = 4096 * 1024 * 8;
      /** Seconds a 4 MiB download takes, as the test sees it (kubectl's own time only lowers the rate). */
      const download = async (client: PodInfo, server: PodInfo): Promise<number> => {
        const t0 = Date.now();
        const r = await kubectl(e(), ['exec', client.name, '--', 'wget', '-q', '-O', '/dev/null', `http://${server.ip}:8080/blob`]);
        if (r.code !== 0) throw new Error(`wget from ${server.name}: ${r.stderr}`);
        return (Date.now() - t0) / 1000;
      };
      await eventually(
        'bw-server serving',
        async () =>
          (await kubectl(e(), ['exec', 'bw-plain', '--', 'wget', '-q', '-O', '/dev/null', `http://${free.ip}:8080/blob`])).code === 0,
      );
      const out = bits / (await download(plain, limitedOut)) / 1e6;
      const into = bits / (await download(limitedIn, free)) / 1e6;
      console.log(
        `terway bandwidth on real pods: out of a pod limited to 8 Mbit/s ${out.toFixed(2)} Mbit/s, into one ${into.toFixed(2)} Mbit/s`,
      );
      // tbf lets a burst through at first: well below twice the limit, never above (a loaded machine only slows it)
      expect(out).toBeLessThan(12);
      expect(into).toBeLessThan(12);
      // the shaping is the kernel's: tbf at 8 Mbit/s on the pod's side of its veth, and it held packets back
      const qdisc = run('nsenter', [
        '-t',
        String(podPid(e().lab.nodes[0]!, 'bw-server')),
        '-n',
        'tc',
        '-s',
        'qdisc',
        'show',
        'dev',
        'eth0',
      ]);
      expect(qdisc).toMatch(/qdisc tbf .* rate 8Mbit/);
      expect(Number(/overlimits (\d+)/.exec(qdisc)?.[1])).toBeGreaterThan(0);
      await k(e(), ['delete', 'pod', 'bw-server', 'bw-free', 'bw-client', 'bw-plain', '--wait=true']);
    });

    test('ECS throttling: STATUS says so (50) and pods wait with an event naming it; once the limit lifts they start, no IP twice, nothing leaked', async () => {
      const [a] = e().lab.nodes;
      const none = { count: 0, windowMs: 60_000 };
      await control('PUT', 'config', { rateLimits: { CreateNetworkInterface: none, AssignPrivateIpAddresses: none } });
      // more pods than the node keeps idle (max_pool_size): some need addresses from ECS
      await k(e(), ['apply', '-f', '-'], deploymentYaml('tw-t', LAB_POOL.max_pool_size + 3, a!.name));
      const event = await eventually(
        'a sandbox failure naming Throttling',
        async () => {
          const ev = await kjson(e(), ['get', 'events', '--field-selector', 'reason=FailedCreatePodSandBox']);
          return ev.items.map((x) => String((x as { message?: string }).message)).find((m) => /terway/.test(m) && /Throttling/.test(m));
        },
        240_000,
      );
      expect(event).toMatch(/AssignPrivateIpAddresses|create ENI/);
      // STATUS tells the truth while the pool backs off with nothing idle (containerd then holds new sandboxes back)
      const st = await eventually('STATUS 50 naming Throttling', async () => {
        const r = statusOn(a!, '10-terway.conflist', 'terway');
        return !r.ok && /Throttling/.test(r.error!.msg) ? r : undefined;
      });
      expect(st.error).toMatchObject({ code: 50, msg: expect.stringMatching(/^terway: no address can be had now: /) });
      expect((await podsIn(e(), 'default', 'app=tw-t')).some((p) => p.phase === 'Pending')).toBe(true);
      await control('PUT', 'config', { rateLimits: PUBLISHED });
      const pods = await runningApp(e(), 'tw-t', LAB_POOL.max_pool_size + 3, 360_000);
      const all = [...app, ...pods];
      expect(new Set(all.map((p) => p.ip)).size).toBe(all.length);
      await expectCloudHolds(all);
      await eventually('STATUS ok again', async () => statusOn(a!, '10-terway.conflist', 'terway').ok);
      expect(doctorNode(a!).rows.filter((r) => r.state !== 'healthy')).toEqual([]);
      await deleteApp(e(), 'tw-t');
      const mine = app.filter((p) => p.node === a!.name).length;
      await eventually(`only tw-a's leases left on ${a!.name}`, async () => leases(a!).length === mine);
      await expectCloudHolds(app);
    });

    test('deleting the pods returns their addresses: leases go, the pool keeps at most max_pool_size idle, the rest goes back to the cloud', async () => {
      await deleteApp(e(), 'tw-a');
      await deleteApp(e(), 'tw-b');
      for (const node of e().lab.nodes) await eventually(`no lease on ${node.name}`, async () => leases(node).length === 0);
      await expectCloudHolds([]);
      for (const node of e().lab.nodes) {
        const d = doctorNode(node);
        expect(d.rows.filter((r) => r.state !== 'healthy')).toEqual([]);
      }
    });

    test("leaks planted by hand: a sandbox gone behind the runtime's back and an ADD killed before it was cached; doctor names each, --gc --apply gives both IPs back to the pool, the live pod keeps its own", async () => {
      const [a] = e().lab.nodes as [LabNode];
      await k(e(), ['apply', '-f', '-'], podJson('keeper', a.name));
      const keeper = await runningPod('keeper');
      const before = doctorNode(a).rows;
      try {
        plantAttachment(a, 'terway', 'twleak1', 'ghost1');
        plantAttachment(a, 'terway', 'twleak2', 'ghost2');
        const gone = doctorNode(a).rows.filter((r) => r.state !== 'healthy');
        expect(gone).toEqual([
          expect.objectContaining({
            state: 'leaked',
            objects: [expect.stringMatching(/^cache terway\//), expect.stringMatching(/^terway 172\.20\.0\./)],
          }),
          expect.objectContaining({
            state: 'leaked',
            objects: [expect.stringMatching(/^cache terway\//), expect.stringMatching(/^terway 172\.20\.0\./)],
          }),
        ]);
        const ghostIps = gone.map((r) => r.objects[1]!.split(' ')[1]!);
        expect(leases(a).map((l) => l.ip)).toEqual(expect.arrayContaining([keeper.ip, ...ghostIps]));
        // the second ADD killed before the runtime cached it: only terwayd's lease is left of it
        const killed = gone[1]!.containerId;
        nodeRun(a, ['rm', `/var/lib/cni/results/terway-${killed}-eth0`]);
        const dry = doctorGc(a);
        expect(dry.ok).toBe(false);
        expect(dry.out.steps.map((x) => `${x.step} ${x.network} ${x.target}`)).toEqual([
          `del terway ${gone[0]!.containerId}`,
          'gc terway terway',
        ]);
        const applied = doctorGc(a, ['--apply']);
        expect(applied.out).toMatchObject({ applied: true, after: [] });
        expect(applied.out.steps.map((x) => x.ok)).toEqual([true, true]);
        expect(applied.ok).toBe(true);
        // the ghosts' leases are gone, their veths with them; the keeper's row is as it was
        expect(leases(a).map((l) => l.ip)).toEqual([keeper.ip]);
        for (const ns of ['twleak1', 'twleak2'])
          expect(nodeRun(a, ['ip', '-n', ns, '-o', 'link', 'show']).trim().split('\n')).toHaveLength(1);
        expect(doctorNode(a).rows).toEqual(before);
        expect(doctorGc(a)).toMatchObject({ ok: true, out: { steps: [] } });
        expect((await runningPod('keeper')).ip).toBe(keeper.ip);
      } finally {
        nodeRun(a, ['sh', '-c', 'ip netns del twleak1; ip netns del twleak2; true']);
        await kubectl(e(), ['delete', 'pod', 'keeper', '--ignore-not-found', '--wait=true', '--timeout=120s']);
      }
      // the freed IPs went back to the pool: the cloud holds at most max_pool_size idle ones
      await eventually(`no lease on ${a.name}`, async () => leases(a).length === 0);
      await expectCloudHolds([]);
    });
  },
);
