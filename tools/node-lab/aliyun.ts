// terway on the lab's nodes as on Alibaba Cloud, for the node tier (e2e/node/terway.test.ts): each node is an ECS
// instance of the Alibaba Cloud emulator program (`npm run aliyun-emulator`, on the host leg) whose primary IP is
// the node's own address, so the emulated metadata service answers each node as its own VM. The emulator's hooks
// play the instance and the VPC:
// - an ENI attached to an instance appears on that node as a link with the ENI's MAC (eth<device index>), whose
//   other end is plugged into the fabric's bridge, as a NIC into the vSwitch;
// - every private IP of a secondary ENI is delivered by the fabric's router to that ENI's MAC (a permanent
//   neighbour on the pods' vSwitch, whose gateway the router holds), and forgotten when it leaves the ENI.
// Erasable TypeScript (Node's type stripping may run it, as pod-bench.ts runs gcp.ts).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { dump, loadAll } from 'js-yaml';
import { startEmulator, type Emulator } from './emulator.ts';
export type { Emulator } from './emulator.ts';
import { run } from './host.ts';
import { fabricRoutes, pinFabricMac, FABRIC_NETNS, HOST_IP, PREFIX, type Lab, type LabNode } from './lab.ts';

export const ALIYUN = {
  region: 'cn-hangzhou',
  zone: 'cn-hangzhou-i',
  /** The nodes' own vSwitch: the fabric's subnet, each instance's primary IP its node's address. */
  nodeVSwitch: 'vsw-node',
  /** The pods' vSwitch (eni_conf vswitches): where ENIs and their secondary IPs come from. */
  podVSwitch: 'vsw-pod',
  podCidr: '172.20.0.0/24',
  /** The vSwitch gateway (Alibaba Cloud's: the CIDR's third-last address), held by the fabric's router. */
  podGateway: '172.20.0.253',
  /** 3 ENIs (the primary and two for pods: aliyun/eni = 2 on each node), 10 private IPs per ENI. */
  instanceType: 'ecs.g7.large',
  instanceShape: '3,10',
  keys: { id: 'LTAI-lab', secret: 'lab-secret' },
  securityGroup: 'sg-lab',
};

/** The instance the emulator holds for a node. */
export const instanceOf = (node: LabNode): string => `i-${node.id}`;

/**
 * The hooks' shell commands. An ENI's fabric-side link is named after its MAC's last three bytes (unique in the
 * emulator, at most 15 characters); the node's netns after the instance id (i-<id> is netns <prefix>-<id>).
 */
export function vpcEniHooks(): { attach: string; detach: string; assign: string; unassign: string } {
  const fab = FABRIC_NETNS;
  const side = `F=v$(echo "$ENI_MAC" | tr -d : | cut -c7-)`;
  return {
    attach: [
      side,
      `ip link add "eth$DEVICE_INDEX" netns "${PREFIX}-\${INSTANCE_ID#i-}" address "$ENI_MAC" type veth peer name "$F" netns ${fab}`,
      `ip -n ${fab} link set "$F" master fab0 up`,
    ].join(' && '),
    detach: `${side}; ip -n ${fab} link del "$F" 2>/dev/null || true`,
    assign: `for a in $IPS; do ip -n ${fab} neigh replace "$a" lladdr "$ENI_MAC" dev fab0 nud permanent || exit 1; done`,
    // only this ENI's: an address moved to another ENI keeps its new neighbour
    unassign: `for a in $IPS; do if ip -n ${fab} neigh show "$a" dev fab0 | grep -qi "$ENI_MAC"; then ip -n ${fab} neigh del "$a" dev fab0; fi; done; true`,
  };
}

/** The fabric's router as the pods' vSwitch gateway: the address on its bridge, forwarding on. */
function vpcGateway(): void {
  const have = run('ip', ['-n', FABRIC_NETNS, 'addr', 'show', 'dev', 'fab0']);
  if (!have.includes(`${ALIYUN.podGateway}/`)) run('ip', ['-n', FABRIC_NETNS, 'addr', 'add', `${ALIYUN.podGateway}/24`, 'dev', 'fab0']);
  pinFabricMac();
  fabricRoutes();
}

/** `npm run aliyun-emulator` on the host leg, the lab's nodes as its instances, the VPC played by its hooks. */
export function startAliyunEmulator(lab: Lab, root: string, extra: string[] = []): Promise<Emulator> {
  vpcGateway();
  const hooks = vpcEniHooks();
  const net = lab.nodes[0]!.ip.replace(/\.\d+$/, '.0/24');
  return startEmulator(root, 'aliyun-emulator', [
    ...['--listen', `${HOST_IP}:0`, '--region', ALIYUN.region, '--access-key', `${ALIYUN.keys.id}=${ALIYUN.keys.secret}`],
    ...['--vswitch', `${ALIYUN.nodeVSwitch}/${ALIYUN.zone}=${net}`, '--vswitch', `${ALIYUN.podVSwitch}/${ALIYUN.zone}=${ALIYUN.podCidr}`],
    ...['--instance-type', `${ALIYUN.instanceType}=${ALIYUN.instanceShape}`],
    ...lab.nodes.flatMap((n) => ['--instance', `${instanceOf(n)}:${ALIYUN.instanceType}:${ALIYUN.nodeVSwitch}:${n.ip}`]),
    ...['--on-attach', hooks.attach, '--on-detach', hooks.detach],
    ...['--on-ip-assign', hooks.assign, '--on-ip-unassign', hooks.unassign],
    ...extra,
  ]);
}

/** The pool settings of the lab's eni_conf (the test reads them back to judge what the pool keeps). */
export const LAB_POOL = { max_pool_size: 2, min_pool_size: 0 };

/** eni_conf as the lab sets it: the pods' vSwitch, the lab's keys, Terway's pool keys (`pool`). */
export function labEniConf(pool: Record<string, number> = LAB_POOL): string {
  return JSON.stringify({
    version: '1',
    access_key: ALIYUN.keys.id,
    access_secret: ALIYUN.keys.secret,
    security_group: ALIYUN.securityGroup,
    vswitches: { [ALIYUN.zone]: [ALIYUN.podVSwitch] },
    service_cidr: '10.0.0.0/24',
    ...pool,
  });
}

/** packages/terway/config/deploy.yaml with eni-config set as a user sets it, here for the emulator at `endpoint` (host:port). */
export function terwayDeployYaml(root: string, endpoint: string, pool: Record<string, number> = LAB_POOL): string {
  const file = path.join(root, 'packages', 'terway', 'config', 'deploy.yaml');
  const docs = loadAll(fs.readFileSync(file, 'utf8')) as { kind: string; data?: Record<string, string> }[];
  const cm = docs.find((d) => d.kind === 'ConfigMap');
  if (!cm?.data) throw new Error(`${file}: no ConfigMap`);
  cm.data = {
    ...cm.data,
    eni_conf: labEniConf(pool),
    'metadata-endpoint': `http://${endpoint}`,
    'ecs-endpoint': endpoint,
    'vpc-endpoint': endpoint,
    protocol: 'http',
  };
  return docs.map((d) => dump(d)).join('---\n');
}
