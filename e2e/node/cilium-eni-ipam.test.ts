/**
 * cilium-eni-ipam on two real nodes, installed as a user installs it on EKS: `npm run images -- cilium-eni-ipam`
 * (imported into each node's containerd), then `kubectl apply -f` of packages/cilium-eni-ipam/config/{crds,rbac,
 * deploy}.yaml, the operator pointed at moto (EC2, on the lab's host leg) and the agent at an IMDSv2 stand-in that
 * answers each node as its instance. The VPC is the fabric following EC2 (e2e/node/cilium-lib.ts): an ENI attached
 * to a node's instance is a link of that node, and each of its addresses is delivered to its MAC. Everything is
 * checked against EC2's own answers.
 */
import * as path from 'node:path';
import { DescribeNetworkInterfacesCommand } from '@aws-sdk/client-ec2';
import { ip } from '@cnikit/netlib';
import type { CiliumNode } from '../../packages/cilium-eni-ipam/src/types';
import { REPO_ROOT } from '../lib/paths';
import { importImage, installDebianPlugins, nodeRun, type LabNode } from '../../tools/node-lab/lab';
import {
  buildImages,
  describeNodes,
  eventually,
  k,
  kjson,
  nodePrerequisites,
  ping,
  plantAttachment,
  podsIn,
  readyCondition,
  startNodes,
  statusOn,
  stopNodes,
  type NodeEnv,
  type PodInfo,
} from './lib';
import { deleteApp, deploymentYaml, doctorNode, runningApp } from './coil-lib';
import { ciliumDeployYaml, POD_SUBNET, startAwsLab, type AwsLab } from './cilium-lib';

const CONFIG = path.join(REPO_ROOT, 'packages', 'cilium-eni-ipam', 'config');
/** The image's own doctor, as the agent DaemonSet's init container installed it on the node. */
const DOCTOR = ['/opt/cni/bin/cnikit-cilium-eni-ipam', 'doctor'];
const PRE_ALLOCATE = 4;
let env: NodeEnv | undefined;
let aws: AwsLab | undefined;
const e = (): NodeEnv => env!;

const inPodSubnet = (a: string): boolean => ip.contains(POD_SUBNET.cidr, a);

/** Private IPs EC2 holds on each node's secondary ENIs (device index >= 1), by node; their primary IPs too if asked. */
async function ec2Ips(withPrimaries = false): Promise<Record<string, string[]>> {
  const out = await aws!.world.client.send(
    new DescribeNetworkInterfacesCommand({ Filters: [{ Name: 'attachment.instance-id', Values: Object.values(aws!.instances) }] }),
  );
  const byNode: Record<string, string[]> = Object.fromEntries(e().lab.nodes.map((n) => [n.name, []]));
  for (const eni of out.NetworkInterfaces ?? []) {
    if (!eni.Attachment?.DeviceIndex) continue;
    const node = Object.keys(aws!.instances).find((n) => aws!.instances[n] === eni.Attachment!.InstanceId)!;
    byNode[node]!.push(...(eni.PrivateIpAddresses ?? []).filter((a) => withPrimaries || !a.Primary).map((a) => a.PrivateIpAddress!));
  }
  for (const k of Object.keys(byNode)) byNode[k]!.sort();
  return byNode;
}

const ciliumNode = (name: string): Promise<CiliumNode> => kjson<CiliumNode>(e(), ['get', 'ciliumnode', name]);

/** The node's pool: IPs whose ENI the operator has described in status.eni.enis. */
async function usablePool(name: string): Promise<string[]> {
  const n = await ciliumNode(name);
  const enis = n.status?.eni?.enis ?? {};
  return Object.entries(n.spec.ipam?.pool ?? {})
    .filter(([, v]) => v.resource !== undefined && v.resource in enis)
    .map(([ip]) => ip)
    .sort();
}

/** The `from <ip>` rules of the plugin on a node (pref 111). */
const podRules = (node: LabNode): string[] =>
  nodeRun(node, ['ip', 'rule', 'show'])
    .split('\n')
    .filter((l) => /^111:\s+from \d/.test(l));

describeNodes('node: cilium-eni-ipam from its image and manifests on two real nodes, against moto (EC2)', nodePrerequisites(), () => {
  beforeAll(async () => {
    const images = buildImages(['cilium-eni-ipam']);
    env = await startNodes(2, 'none');
    importImage(env.lab, images['cilium-eni-ipam']!);
    for (const node of env.lab.nodes) installDebianPlugins(node, ['ptp']);
    aws = await startAwsLab(env.lab);
  }, 3_600_000);

  afterAll(async () => {
    await aws?.stop();
    await stopNodes(env);
    env = undefined;
  }, 240_000);

  test('kubectl apply of the manifests: a CiliumNode per Node, its pool pre-allocated in EC2 before any pod, the plugin installed, Nodes Ready', async () => {
    await k(e(), ['apply', '-f', path.join(CONFIG, 'crds.yaml')]);
    await k(e(), ['wait', '--for=condition=Established', 'crd/ciliumnodes.cilium.io', '--timeout=60s']);
    await k(e(), ['apply', '-f', path.join(CONFIG, 'rbac.yaml')]);
    await k(e(), [
      ...['-n', 'kube-system', 'create', 'secret', 'generic', 'cilium-eni-operator-aws'],
      ...['--from-literal=access-key-id=testing', '--from-literal=secret-access-key=testing'],
    ]);
    await k(e(), ['apply', '-f', '-'], ciliumDeployYaml(REPO_ROOT, aws!));
    await k(e(), ['-n', 'kube-system', 'rollout', 'status', 'daemonset/cilium-eni-agent', '--timeout=240s']);
    for (const node of e().lab.nodes) {
      const pool = await eventually(`${node.name}'s pool of ${PRE_ALLOCATE}`, async () => {
        const p = await usablePool(node.name);
        return p.length >= PRE_ALLOCATE ? p : undefined;
      });
      const cn = await ciliumNode(node.name);
      expect(cn.spec['instance-id']).toBe(aws!.instances[node.name]);
      expect(pool.every(inPodSubnet)).toBe(true);
      // the pre-allocation is EC2's: secondary IPs on an ENI of the node's own instance, before any pod
      const ips = await ec2Ips();
      for (const ip of pool) expect(ips[node.name]).toContain(ip);
      await eventually(`${node.name} Ready`, async () => (await readyCondition(e(), node.name))?.status === 'True', 240_000);
      expect(JSON.parse(nodeRun(node, ['cat', '/etc/cni/net.d/10-cilium-eni.conflist']))).toMatchObject({
        plugins: [{ type: 'ptp', ipam: { type: 'cilium-eni-ipam' } }],
      });
    }
    await k(e(), [
      '-n',
      'kube-system',
      'wait',
      '--for=jsonpath={.status.availableReplicas}=2',
      'deployment/cilium-eni-operator',
      '--timeout=240s',
    ]);
  });

  let app: PodInfo[] = [];
  test("pods on both nodes get addresses of their node's ENIs, published as used, and reach each other through the VPC", async () => {
    await k(e(), ['apply', '-f', '-'], deploymentYaml('eni-a', 3, 'kl-a'));
    await k(e(), ['apply', '-f', '-'], deploymentYaml('eni-b', 3, 'kl-b'));
    app = [...(await runningApp(e(), 'eni-a', 3)), ...(await runningApp(e(), 'eni-b', 3))];
    expect(app.every((p) => inPodSubnet(p.ip))).toBe(true);
    expect(new Set(app.map((p) => p.ip)).size).toBe(6);
    const ips = await ec2Ips();
    for (const p of app) expect(ips[p.node]).toContain(p.ip);
    for (const node of e().lab.nodes) {
      const mine = app.filter((p) => p.node === node.name).map((p) => p.ip);
      await eventually(`${node.name}'s used = its pods`, async () => {
        const used = Object.keys((await ciliumNode(node.name)).status?.ipam?.used ?? {}).sort();
        if (JSON.stringify(used) === JSON.stringify([...mine].sort())) return true;
        throw new Error(`used ${used.join(',')}, pods ${mine.join(',')}`);
      });
      expect(podRules(node).length).toBe(3);
      expect((doctorNode(node, [], DOCTOR).out.attachments ?? []).filter((r) => r.state !== 'healthy')).toEqual([]);
    }
    const a = app.find((p) => p.node === 'kl-a')!;
    const b = app.find((p) => p.node === 'kl-b')!;
    expect((await ping(e(), a, b.ip)).code).toBe(0);
    expect((await ping(e(), b, a.ip)).code).toBe(0);
  });

  test('deleting the pods: nothing used, their rules gone, and the excess released back to EC2 after the release delay', async () => {
    await deleteApp(e(), 'eni-a');
    await deleteApp(e(), 'eni-b');
    for (const node of e().lab.nodes) {
      await eventually(
        `nothing used on ${node.name}`,
        async () => Object.keys((await ciliumNode(node.name)).status?.ipam?.used ?? {}).length === 0,
      );
      await eventually(`no pod rule on ${node.name}`, async () => podRules(node).length === 0);
    }
    await expectPreAllocationOnly();
  });

  test("EC2 throttled: pods wait with an event naming EC2's refusal, STATUS says so (50); once EC2 answers they start, no IP twice", async () => {
    const [a] = e().lab.nodes;
    for (const action of ['AssignPrivateIpAddresses', 'CreateNetworkInterface'])
      aws!.ec2.rules.push({ action, code: 'RequestLimitExceeded' });
    // more pods than the node's pre-allocated pool: the rest need EC2
    await k(e(), ['apply', '-f', '-'], deploymentYaml('eni-t', PRE_ALLOCATE + 3, a!.name));
    try {
      const event = await eventually(
        'a sandbox failure naming RequestLimitExceeded',
        async () => {
          const ev = await kjson(e(), ['get', 'events', '--field-selector', 'reason=FailedCreatePodSandBox']);
          return ev.items.map((x) => String((x as { message?: string }).message)).find((m) => /RequestLimitExceeded/.test(m));
        },
        240_000,
      );
      expect(event).toMatch(/no free IP in spec\.ipam\.pool .*; the operator's last error: .*RequestLimitExceeded/);
      expect(statusOn(a!, '10-cilium-eni.conflist', 'cilium-eni-ipam')).toMatchObject({
        ok: false,
        error: {
          code: 50,
          msg: expect.stringMatching(/^cilium-eni-ipam: no free IP on this node yet; the operator's last error: .*RequestLimitExceeded/),
        },
      });
      expect((await podsIn(e(), 'default', 'app=eni-t')).some((p) => p.phase === 'Pending')).toBe(true);
    } finally {
      aws!.ec2.rules.length = 0;
    }
    const pods = await runningApp(e(), 'eni-t', PRE_ALLOCATE + 3, 360_000);
    expect(new Set(pods.map((p) => p.ip)).size).toBe(pods.length);
    const ips = await ec2Ips();
    for (const p of pods) expect(ips[a!.name]).toContain(p.ip);
    await eventually('STATUS ok again', async () => statusOn(a!, '10-cilium-eni.conflist', 'cilium-eni-ipam').ok);
    await deleteApp(e(), 'eni-t');
    await eventually(
      `nothing used on ${a!.name}`,
      async () => Object.keys((await ciliumNode(a!.name)).status?.ipam?.used ?? {}).length === 0,
    );
    await expectPreAllocationOnly();
  });

  test("leaks planted by hand: a sandbox gone behind the runtime's back and an ADD killed before it was cached; doctor names each, --gc --apply gives both IPs back to the node's pool, the live pod keeps its own", async () => {
    const [a] = e().lab.nodes as [LabNode];
    const doctor = (extra: string[] = []) => doctorNode(a, extra, DOCTOR);
    const unhealthy = () => doctor().out.attachments!.filter((r) => r.state !== 'healthy');
    const used = async (): Promise<string[]> => Object.keys((await ciliumNode(a.name)).status?.ipam?.used ?? {}).sort();
    await k(e(), ['apply', '-f', '-'], deploymentYaml('eni-k', 1, a.name));
    const [keeper] = (await runningApp(e(), 'eni-k', 1)) as [PodInfo];
    const before = doctor().out.attachments;
    try {
      plantAttachment(a, 'cilium-eni', 'cleak1', 'ghost1');
      plantAttachment(a, 'cilium-eni', 'cleak2', 'ghost2');
      const gone = unhealthy();
      const planted = {
        state: 'leaked',
        objects: [expect.stringMatching(/^cache cilium-eni\/eth0 /), expect.stringMatching(/^cilium-eni /)],
      };
      expect(gone).toEqual([expect.objectContaining(planted), expect.objectContaining(planted)]);
      const ghostIps = gone.map((r) => r.objects[1]!.split(' ')[1]!);
      await eventually('the ghosts published as used', async () => ghostIps.every((x) => used().then((u) => u.includes(x))));
      // the second ADD killed before the runtime cached it: only the agent's lease (and ptp's veth) is left of it
      nodeRun(a, ['rm', `/var/lib/cni/results/cilium-eni-${gone[1]!.containerId}-eth0`]);
      const dry = doctor(['--gc']);
      expect(dry.ok).toBe(false);
      const steps = dry.out['steps'] as { step: string; network: string; target: string; ok?: boolean }[];
      expect(steps.map((x) => `${x.step} ${x.network} ${x.target}`)).toEqual([
        `del cilium-eni ${gone[0]!.containerId}`,
        'gc cilium-eni ptp',
      ]);
      const applied = doctor(['--gc', '--apply']);
      expect(applied.out).toMatchObject({ applied: true, after: [] });
      // Debian's ptp speaks no 1.1.0: GC goes to its IPAM, as a 1.1.0 ptp would pass it on
      expect((applied.out['steps'] as typeof steps).map((x) => [x.ok, x.target])).toEqual([
        [true, gone[0]!.containerId],
        [true, 'cilium-eni-ipam (the ipam of ptp)'],
      ]);
      expect(applied.ok).toBe(true);
      expect(doctor().out.attachments).toEqual(before);
      await eventually("only the keeper's IP used", async () => JSON.stringify(await used()) === JSON.stringify([keeper.ip]));
      expect(podRules(a)).toEqual([expect.stringContaining(`from ${keeper.ip} `)]);
      expect(doctor(['--gc'])).toMatchObject({ ok: true, out: { steps: [] } });
      expect((await runningApp(e(), 'eni-k', 1)).map((p) => p.ip)).toEqual([keeper.ip]);
    } finally {
      nodeRun(a, ['sh', '-c', 'ip netns del cleak1; ip netns del cleak2; true']);
    }
    await deleteApp(e(), 'eni-k');
    await eventually(`nothing used on ${a.name}`, async () => (await used()).length === 0);
    await expectPreAllocationOnly();
  });
});

/** The pools shrink back to pre-allocate through the release handshake; EC2 holds exactly them, and the VPC follows. */
async function expectPreAllocationOnly(): Promise<void> {
  await eventually(
    'EC2 back to the pre-allocation',
    async () => {
      const ips = await ec2Ips();
      for (const node of e().lab.nodes) {
        const pool = await usablePool(node.name);
        if (pool.length > PRE_ALLOCATE || JSON.stringify(ips[node.name]) !== JSON.stringify(pool))
          throw new Error(`${node.name}: EC2 ${ips[node.name]!.join(',')}, pool ${pool.join(',')}`);
      }
      const vpc = await aws!.syncVpc();
      const all = Object.values(await ec2Ips(true))
        .flat()
        .sort();
      if (JSON.stringify(Object.keys(vpc.neighbours).sort()) !== JSON.stringify(all)) throw new Error('the VPC lags EC2');
      return true;
    },
    240_000,
  );
}
