/**
 * Command lines of the two daemons (commander): `cilium-eni-operator` and `cilium-eni-agent`.
 * Flags follow Cilium's names where one exists.
 */
import * as os from 'node:os';
import { Command } from 'commander';
import { HealthServer, connect, installCrd, traceLogger } from '@cnikit/kube';
import { Agent, type InstanceData } from './agent';
import { ciliumNodeCrd } from './crd';
import { SdkEc2 } from './ec2';
import { LimitsTable } from './limits';
import { Operator } from './operator';
import { TokenBucket } from './rate-limit';

const int = (v: string): number => {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`expected a non-negative number, got ${JSON.stringify(v)}`);
  return n;
};

function onSignals(stop: () => Promise<void>): void {
  const h = (): void => { void stop().finally(() => process.exit(0)); };
  process.once('SIGTERM', h);
  process.once('SIGINT', h);
}

export async function operatorMain(argv: string[]): Promise<void> {
  const p = new Command('cilium-eni-operator')
    .option('--kubeconfig <path>').option('--cluster-name <name>', 'tag value of io.cilium/cluster-name on created ENIs', 'default')
    .option('--ec2-endpoint <url>', 'EC2 endpoint override (moto, a proxy)').option('--region <r>', 'AWS region', process.env.AWS_REGION ?? 'us-east-1')
    .option('--limit-ipam-api-qps <n>', 'EC2 calls per second', int, 4).option('--limit-ipam-api-burst <n>', 'EC2 burst', int, 20)
    .option('--parallel-alloc-workers <n>', 'nodes handled at once', int, 50)
    .option('--aws-release-excess-ips', 'release excess IPs (handshake with the agent)', false)
    .option('--excess-ip-release-delay <s>', 'seconds an IP stays in excess before release', int, 180)
    .option('--instance-limits <json>', 'instance-type limits override: {"type":{"adapters":N,"ipv4":M}}')
    .option('--eni-gc-interval <s>', 'ENI GC period in seconds (0 = off)', int, 300)
    .option('--leader-election-namespace <ns>', 'namespace of the Lease', 'kube-system')
    .option('--install-crd', 'create/update the CiliumNode CRD at start', false)
    .option('--metrics-address <host:port>', 'metrics and health', '127.0.0.1:9963');
  p.parse(argv, { from: 'user' });
  const o = p.opts();
  const log = traceLogger('cilium-eni.operator');
  const transport = connect({ kubeconfig: o.kubeconfig });
  if (o.installCrd) await installCrd(transport, ciliumNodeCrd());
  const ec2 = new SdkEc2({ endpoint: o.ec2Endpoint, region: o.region, limiter: new TokenBucket(o.limitIpamApiQps, o.limitIpamApiBurst) });
  const { elector, operator } = await Operator.runWithLeaderElection({
    transport, ec2, clusterName: o.clusterName, limits: LimitsTable.parse(o.instanceLimits), workers: o.parallelAllocWorkers,
    releaseExcess: o.awsReleaseExcessIps, excessDelayMs: o.excessIpReleaseDelay * 1000, gcIntervalMs: o.eniGcInterval * 1000,
    namespace: o.leaderElectionNamespace, identity: `${os.hostname()}-${process.pid}`, logger: log,
  });
  const [host, port] = String(o.metricsAddress).split(':');
  const server = await new HealthServer({ host, port: Number(port), registry: operator.metrics.registry }).listen();
  onSignals(async () => { await elector.stop(); await operator.stop(); await server.close(); transport.close(); });
}

/** Instance data from EC2's instance metadata service (IMDSv2), or from flags. */
export async function instanceFromImds(endpoint = 'http://169.254.169.254'): Promise<InstanceData> {
  const tok = await (await fetch(`${endpoint}/latest/api/token`, { method: 'PUT', headers: { 'X-aws-ec2-metadata-token-ttl-seconds': '60' }, signal: AbortSignal.timeout(2000) })).text();
  const get = async (p: string): Promise<string> => {
    const r = await fetch(`${endpoint}/latest/meta-data/${p}`, { headers: { 'X-aws-ec2-metadata-token': tok }, signal: AbortSignal.timeout(2000) });
    if (!r.ok) throw new Error(`IMDS ${p}: HTTP ${r.status}`);
    return (await r.text()).trim();
  };
  const mac = await get('mac');
  return {
    instanceId: await get('instance-id'), instanceType: await get('instance-type'), availabilityZone: await get('placement/availability-zone'),
    vpcId: await get(`network/interfaces/macs/${mac}/vpc-id`), nodeSubnetId: await get(`network/interfaces/macs/${mac}/subnet-id`),
  };
}

export async function agentMain(argv: string[]): Promise<void> {
  const p = new Command('cilium-eni-agent')
    .option('--kubeconfig <path>').option('--node-name <name>', 'this node', process.env.NODE_NAME ?? os.hostname())
    .option('--socket <path>', 'UNIX socket for the IPAM plugin', '/run/cilium-eni-ipam/agent.sock')
    .option('--imds-endpoint <url>', 'instance metadata service', 'http://169.254.169.254')
    .option('--instance-id <id>').option('--instance-type <t>').option('--vpc-id <id>').option('--availability-zone <az>').option('--node-subnet-id <id>')
    .option('--pre-allocate <n>', 'spec.ipam.pre-allocate', int).option('--min-allocate <n>', 'spec.ipam.min-allocate', int)
    .option('--max-allocate <n>', 'spec.ipam.max-allocate', int).option('--max-above-watermark <n>', 'spec.ipam.max-above-watermark', int)
    .option('--first-interface-index <n>', 'spec.eni.first-interface-index', int)
    .option('--subnet-tags <k=v,...>', 'spec.eni.subnet-tags').option('--security-groups <ids>', 'spec.eni.security-groups (comma-separated)')
    .option('--use-prefix-delegation', 'ask for /28 prefixes', false);
  p.parse(argv, { from: 'user' });
  const o = p.opts();
  const instance: InstanceData = o.instanceId
    ? { instanceId: o.instanceId, instanceType: o.instanceType, vpcId: o.vpcId, availabilityZone: o.availabilityZone, nodeSubnetId: o.nodeSubnetId }
    : await instanceFromImds(o.imdsEndpoint);
  const tags = o.subnetTags ? Object.fromEntries(String(o.subnetTags).split(',').map((kv: string) => kv.split('=') as [string, string])) : undefined;
  const transport = connect({ kubeconfig: o.kubeconfig });
  const agent = new Agent({
    transport, nodeName: o.nodeName, socketPath: o.socket, instance,
    ipam: { 'pre-allocate': o.preAllocate, 'min-allocate': o.minAllocate, 'max-allocate': o.maxAllocate, 'max-above-watermark': o.maxAboveWatermark },
    eni: { 'first-interface-index': o.firstInterfaceIndex, 'subnet-tags': tags, 'security-groups': o.securityGroups?.split(','), 'use-prefix-delegation': o.usePrefixDelegation || undefined },
  });
  await agent.start();
  await agent.waitForPool(10 * 60_000);
  onSignals(async () => { await agent.stop(); transport.close(); });
}
