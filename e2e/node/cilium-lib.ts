/**
 * AWS for the node lab's nodes (e2e/node/cilium-eni-ipam.test.ts): moto as EC2 on the host leg, one EC2 instance
 * per node, an IMDSv2 stand-in answering each node (by its address) as its instance, and the VPC played by the
 * fabric: every ENI attached to a node's instance in EC2 is a link of that node with the ENI's MAC (its peer on
 * the fabric's bridge, as a NIC in the subnet), and the fabric's router, holding the pods' subnet gateway,
 * delivers each private IP of an ENI to its MAC (a permanent neighbour). moto has no hooks: a loop reads EC2
 * (DescribeNetworkInterfaces) and follows it, as the VPC follows the API. The pod benchmark (tools/node-lab/
 * pod-bench.ts --family cilium-eni-ipam) loads it bundled by esbuild (tools/bench/node-pods-cilium.mjs).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { DescribeNetworkInterfacesCommand } from '@aws-sdk/client-ec2';
import { dump, loadAll } from 'js-yaml';
import {
  instanceMetadata,
  makeWorld,
  runInstances,
  startFaultProxy,
  startImds,
  startMoto,
  type FaultProxy,
  type Imds,
  type Moto,
  type World,
} from '@cnikit/cilium-eni-ipam-testing';
import { normalizeMac } from '../../packages/cilium-eni-ipam/src/node-sync';
import { fabricRoutes, FABRIC_NETNS, HOST_IP, pinFabricMac, type Lab, type LabNode } from '../../tools/node-lab/lab';
import { run, tryRun } from '../../tools/node-lab/host';

/** The pods' subnet of the fixture's VPC (makeWorld: pods-a, tag pods=a) and its gateway, the subnet's first host. */
export const POD_SUBNET = { cidr: '10.0.64.0/18', gateway: '10.0.64.1', tags: 'pods=a' };
export const INSTANCE_TYPE = 'm5.large';

export interface AwsLab {
  moto: Moto;
  /** What the operator calls: a fault proxy in front of moto (its rules inject EC2's errors). */
  ec2: FaultProxy;
  imds: Imds;
  world: World;
  /** node name -> instance id */
  instances: Record<string, string>;
  /** One pass of the VPC loop (the test calls it to wait for the VPC to follow). */
  syncVpc(): Promise<VpcState>;
  stop(): Promise<void>;
}

/** What the VPC delivers: node -> its ENI links (name, MAC), and address -> MAC. */
export interface VpcState {
  links: Record<string, { name: string; mac: string; eniId: string }[]>;
  neighbours: Record<string, string>;
}

/** Node-side link name of an ENI (its device index) and the fabric-side one (node id + index: unique, short). */
const linkName = (index: number): string => `eni${index}`;
const fabricName = (node: LabNode, index: number): string => `c${node.id}${index}`;

async function readVpc(lab: Lab, world: World, instances: Record<string, string>): Promise<VpcState> {
  const ids = Object.values(instances);
  const out = await world.client.send(new DescribeNetworkInterfacesCommand({ Filters: [{ Name: 'attachment.instance-id', Values: ids }] }));
  const links: VpcState['links'] = Object.fromEntries(lab.nodes.map((n) => [n.name, []]));
  const neighbours: VpcState['neighbours'] = {};
  for (const eni of out.NetworkInterfaces ?? []) {
    const index = eni.Attachment?.DeviceIndex ?? 0;
    const node = lab.nodes.find((n) => instances[n.name] === eni.Attachment?.InstanceId);
    if (!node || index === 0) continue; // the primary ENI is the node's own NIC (eth0 on the fabric)
    const mac = normalizeMac(eni.MacAddress ?? '', eni.NetworkInterfaceId!);
    links[node.name]!.push({ name: linkName(index), mac, eniId: eni.NetworkInterfaceId! });
    for (const a of eni.PrivateIpAddresses ?? []) if (a.PrivateIpAddress) neighbours[a.PrivateIpAddress] = mac;
  }
  return { links, neighbours };
}

/** Makes the kernel what EC2 says: ENI links plugged or unplugged, the router's neighbours added or removed. */
function applyVpc(lab: Lab, want: VpcState): void {
  for (const node of lab.nodes) {
    const have = JSON.parse(run('ip', ['-n', node.netns, '-j', 'link', 'show'])) as { ifname: string; address?: string }[];
    for (const l of want.links[node.name] ?? []) {
      const index = Number(l.name.slice(3));
      const cur = have.find((h) => h.ifname === l.name);
      if (cur && cur.address === l.mac) continue;
      if (cur) run('ip', ['-n', node.netns, 'link', 'del', l.name]);
      const peer = fabricName(node, index);
      run('ip', [
        'link',
        'add',
        l.name,
        'netns',
        node.netns,
        'address',
        l.mac,
        'type',
        'veth',
        'peer',
        'name',
        peer,
        'netns',
        FABRIC_NETNS,
      ]);
      run('ip', ['-n', FABRIC_NETNS, 'link', 'set', peer, 'master', 'fab0', 'up']);
      // an instance brings a hot-plugged ENI up (amazon-ec2-net-utils), without an address
      run('ip', ['-n', node.netns, 'link', 'set', l.name, 'up']);
    }
    for (const h of have.filter((x) => /^eni\d+$/.test(x.ifname)))
      if (!(want.links[node.name] ?? []).some((l) => l.name === h.ifname)) tryRun('ip', ['-n', node.netns, 'link', 'del', h.ifname]);
  }
  const neigh = JSON.parse(run('ip', ['-n', FABRIC_NETNS, '-j', 'neigh', 'show', 'dev', 'fab0', 'nud', 'permanent'])) as {
    dst: string;
    lladdr: string;
  }[];
  for (const [ip, mac] of Object.entries(want.neighbours))
    if (!neigh.some((n) => n.dst === ip && n.lladdr === mac))
      run('ip', ['-n', FABRIC_NETNS, 'neigh', 'replace', ip, 'lladdr', mac, 'dev', 'fab0', 'nud', 'permanent']);
  for (const n of neigh) if (!(n.dst in want.neighbours)) tryRun('ip', ['-n', FABRIC_NETNS, 'neigh', 'del', n.dst, 'dev', 'fab0']);
  answerArp(lab, want);
}

/**
 * The VPC answers every ARP request in a subnet with its router's MAC (an ENI's table routes the subnet on-link,
 * so a node asks for a pod of another node directly): each ENI link of a node holds a permanent neighbour, the
 * router's MAC, for every address EC2 puts on another node's ENIs.
 */
function answerArp(lab: Lab, want: VpcState): void {
  const router = /link\/ether ([0-9a-f:]+)/.exec(run('ip', ['-n', FABRIC_NETNS, 'link', 'show', 'dev', 'fab0']))![1]!;
  for (const node of lab.nodes) {
    const own = new Set((want.links[node.name] ?? []).map((l) => l.mac));
    const others = Object.entries(want.neighbours)
      .filter(([, mac]) => !own.has(mac))
      .map(([a]) => a);
    for (const l of want.links[node.name] ?? []) {
      const have = JSON.parse(run('ip', ['-n', node.netns, '-j', 'neigh', 'show', 'dev', l.name, 'nud', 'permanent'])) as { dst: string }[];
      for (const a of others)
        if (!have.some((h) => h.dst === a))
          run('ip', ['-n', node.netns, 'neigh', 'replace', a, 'lladdr', router, 'dev', l.name, 'nud', 'permanent']);
      for (const h of have) if (!others.includes(h.dst)) tryRun('ip', ['-n', node.netns, 'neigh', 'del', h.dst, 'dev', l.name]);
    }
  }
}

/** moto, an instance per node (of `instanceType`), IMDS per node, the fabric as the VPC (its loop every 500 ms until stop). */
export async function startAwsLab(lab: Lab, instanceType = INSTANCE_TYPE): Promise<AwsLab> {
  const moto = await startMoto({ host: HOST_IP });
  const ec2 = await startFaultProxy(moto.endpoint, [], HOST_IP);
  const world = await makeWorld(moto.endpoint);
  const ids = await runInstances(world, lab.nodes.length, instanceType);
  const instances = Object.fromEntries(lab.nodes.map((n, i) => [n.name, ids[i]!]));
  const byCaller = Object.fromEntries(
    lab.nodes.map((n, i) => [
      n.ip,
      instanceMetadata({
        instanceId: ids[i]!,
        instanceType,
        availabilityZone: world.az,
        mac: `02:00:00:00:00:${(i + 1).toString(16).padStart(2, '0')}`,
        vpcId: world.vpcId,
        subnetId: world.nodeSubnetId,
      }),
    ]),
  );
  const imds = await startImds(byCaller, HOST_IP);
  const fab = run('ip', ['-n', FABRIC_NETNS, 'addr', 'show', 'dev', 'fab0']);
  if (!fab.includes(`${POD_SUBNET.gateway}/`))
    run('ip', ['-n', FABRIC_NETNS, 'addr', 'add', `${POD_SUBNET.gateway}/${POD_SUBNET.cidr.split('/')[1]}`, 'dev', 'fab0']);
  pinFabricMac();
  fabricRoutes();
  const syncVpc = async (): Promise<VpcState> => {
    const want = await readVpc(lab, world, instances);
    applyVpc(lab, want);
    return want;
  };
  let stopped = false;
  let errors = 0;
  const loop = (async () => {
    while (!stopped) {
      await syncVpc().catch((e: unknown) => {
        if (++errors <= 3) console.warn(`VPC loop: ${(e as Error).message}`);
      });
      await new Promise((r) => setTimeout(r, 500));
    }
  })();
  return {
    moto,
    ec2,
    imds,
    world,
    instances,
    syncVpc,
    async stop() {
      stopped = true;
      await loop;
      await imds.stop();
      await ec2.close();
      await moto.stop();
    },
  };
}

/**
 * packages/cilium-eni-ipam/config/deploy.yaml as a user rehearsing against an emulator sets it: the operator's
 * --ec2-endpoint at moto (through the fault proxy), the agent's --imds-endpoint at the stand-in and --subnet-tags at the
 * pods' subnet, and `agentArgs` (the tests' pre-allocation of 4, or none: Cilium's default of 8).
 */
export function ciliumDeployYaml(root: string, aws: AwsLab, agentArgs = ['--pre-allocate=4']): string {
  const file = path.join(root, 'packages', 'cilium-eni-ipam', 'config', 'deploy.yaml');
  type Doc = { kind: string; spec?: { template: { spec: { containers: { args?: string[] }[] } } } };
  const docs = loadAll(fs.readFileSync(file, 'utf8')) as Doc[];
  const args = (kind: string): string[] => {
    const c = docs.find((d) => d.kind === kind)?.spec?.template.spec.containers[0];
    if (!c) throw new Error(`${file}: no ${kind}`);
    return (c.args ??= []);
  };
  args('Deployment').push(`--ec2-endpoint=${aws.ec2.endpoint}`, '--region=us-east-1', '--excess-ip-release-delay=5');
  args('DaemonSet').push(`--imds-endpoint=${aws.imds.endpoint}`, `--subnet-tags=${POD_SUBNET.tags}`, ...agentArgs);
  return docs.map((d) => dump(d)).join('---\n');
}
