/**
 * Command lines of the two daemons (commander): `cilium-eni-operator` and `cilium-eni-agent`.
 * Flags follow Cilium's names where one exists.
 */
import * as os from 'node:os';
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { HealthServer, connect, installCrd, leaderIdentity, parseListenAddr, traceLogger, type ListenAddr } from '@cnikit/kube';
import { Agent, type InstanceData } from './agent';
import { ciliumNodeCrd } from './crd';
import { SdkEc2 } from './ec2';
import { LimitsTable } from './limits';
import { Operator } from './operator';
import { TokenBucket } from './rate-limit';
import type { EniSpec, IpamSpec } from './types';

/** A bad command line: the mains print `<program>: <message>` and exit with `exitCode` (2; 0 for --help). */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 2,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

const int = (v: string): number => {
  const n = Number(v);
  if (v.trim() === '' || !Number.isInteger(n) || n < 0)
    throw new InvalidArgumentError(`expected a non-negative integer, got ${JSON.stringify(v)}`);
  return n;
};
const positive = (v: string): number => {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n <= 0)
    throw new InvalidArgumentError(`expected a positive number, got ${JSON.stringify(v)}`);
  return n;
};
const listenAddr = (v: string): ListenAddr => {
  try {
    return parseListenAddr(v);
  } catch (e) {
    throw new InvalidArgumentError((e as Error).message.replace(/^listen address: /, ''));
  }
};
const url = (v: string): string => {
  try {
    new URL(v);
  } catch {
    throw new InvalidArgumentError(`expected a URL, got ${JSON.stringify(v)}`);
  }
  return v;
};
const limits = (v: string): LimitsTable => {
  try {
    return LimitsTable.parse(v);
  } catch (e) {
    throw new InvalidArgumentError((e as Error).message.replace(/^--instance-limits: /, ''));
  }
};
const tags = (v: string): Record<string, string> =>
  Object.fromEntries(
    v.split(',').map((kv) => {
      const i = kv.indexOf('=');
      if (i <= 0) throw new InvalidArgumentError(`expected k=v[,k=v...], got ${JSON.stringify(v)}`);
      return [kv.slice(0, i), kv.slice(i + 1)];
    }),
  );
const list = (v: string): string[] => {
  const l = v
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
  if (!l.length) throw new InvalidArgumentError(`expected a comma-separated list, got ${JSON.stringify(v)}`);
  return l;
};

/** Runs commander without letting it exit the process or print errors: bad flags become CliError. */
function parseWith(p: Command, argv: string[]): Record<string, unknown> {
  p.exitOverride()
    .configureOutput({ writeErr: () => undefined, outputError: () => undefined })
    .allowExcessArguments(false);
  try {
    p.parse(argv, { from: 'user' });
  } catch (e) {
    if (e instanceof CommanderError) throw new CliError(e.message.replace(/^error: /, ''), e.exitCode === 0 ? 0 : 2);
    throw e;
  }
  return p.opts();
}

function onSignals(stop: () => Promise<void>): void {
  const h = (): void => {
    void stop().finally(() => process.exit(0));
  };
  process.once('SIGTERM', h);
  process.once('SIGINT', h);
}

export interface OperatorFlags {
  kubeconfig?: string;
  clusterName: string;
  ec2Endpoint?: string;
  region: string;
  qps: number;
  burst: number;
  workers: number;
  releaseExcess: boolean;
  excessDelayMs: number;
  limits: LimitsTable;
  gcIntervalMs: number;
  leaderElectionNamespace: string;
  installCrd: boolean;
  /** "" host = every address. */
  metrics: ListenAddr;
}

/** The operator's command line; throws CliError on a bad one. */
export function parseOperatorFlags(argv: string[], env: NodeJS.ProcessEnv = process.env): OperatorFlags {
  const p = new Command('cilium-eni-operator')
    .option('--kubeconfig <path>')
    .option('--cluster-name <name>', 'tag value of io.cilium/cluster-name on created ENIs', 'default')
    .option('--ec2-endpoint <url>', 'EC2 endpoint override (moto, a proxy)', url)
    .option('--region <r>', 'AWS region', env.AWS_REGION ?? 'us-east-1')
    .option('--limit-ipam-api-qps <n>', 'EC2 calls per second', positive, 4)
    .option('--limit-ipam-api-burst <n>', 'EC2 burst', int, 20)
    .option('--parallel-alloc-workers <n>', 'nodes handled at once', int, 50)
    .option('--aws-release-excess-ips', 'release excess IPs (handshake with the agent)', false)
    .option('--excess-ip-release-delay <s>', 'seconds an IP stays in excess before release', int, 180)
    .option('--instance-limits <json>', 'instance-type limits override: {"type":{"adapters":N,"ipv4":M}}', limits)
    .option('--eni-gc-interval <s>', 'ENI GC period in seconds (0 = off)', int, 300)
    .option('--leader-election-namespace <ns>', 'namespace of the Lease', 'kube-system')
    .option('--install-crd', 'create/update the CiliumNode CRD at start', false)
    .option('--metrics-address <[host]:port>', 'metrics and health', listenAddr, listenAddr('127.0.0.1:9963'));
  const o = parseWith(p, argv);
  if ((o.limitIpamApiBurst as number) < 1) throw new CliError("option '--limit-ipam-api-burst <n>' argument must be at least 1");
  if ((o.parallelAllocWorkers as number) < 1) throw new CliError("option '--parallel-alloc-workers <n>' argument must be at least 1");
  if (!String(o.clusterName)) throw new CliError("option '--cluster-name <name>' must not be empty");
  return {
    kubeconfig: o.kubeconfig as string | undefined,
    clusterName: o.clusterName as string,
    ec2Endpoint: o.ec2Endpoint as string | undefined,
    region: o.region as string,
    qps: o.limitIpamApiQps as number,
    burst: o.limitIpamApiBurst as number,
    workers: o.parallelAllocWorkers as number,
    releaseExcess: o.awsReleaseExcessIps as boolean,
    excessDelayMs: (o.excessIpReleaseDelay as number) * 1000,
    limits: (o.instanceLimits as LimitsTable | undefined) ?? new LimitsTable(),
    gcIntervalMs: (o.eniGcInterval as number) * 1000,
    leaderElectionNamespace: o.leaderElectionNamespace as string,
    installCrd: o.installCrd as boolean,
    metrics: o.metricsAddress as ListenAddr,
  };
}

/** Prints a CliError the way a command line tool does and exits; anything else propagates. */
async function cliMain(name: string, body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (e) {
    if (!(e instanceof CliError)) throw e;
    if (e.exitCode !== 0) process.stderr.write(`${name}: ${e.message}\n(see ${name} --help)\n`);
    process.exit(e.exitCode);
  }
}

export function operatorMain(argv: string[]): Promise<void> {
  return cliMain('cilium-eni-operator', async () => {
    const o = parseOperatorFlags(argv);
    const log = traceLogger('cilium-eni.operator');
    const transport = connect({ kubeconfig: o.kubeconfig });
    if (o.installCrd) await installCrd(transport, ciliumNodeCrd());
    const ec2 = new SdkEc2({ endpoint: o.ec2Endpoint, region: o.region, limiter: new TokenBucket(o.qps, o.burst) });
    const fatal = (why: string): never => {
      process.stderr.write(`cilium-eni-operator: ${why}\n`);
      process.exit(1);
    };
    const { runner, operator } = await Operator.runWithLeaderElection({
      transport,
      ec2,
      clusterName: o.clusterName,
      limits: o.limits,
      workers: o.workers,
      releaseExcess: o.releaseExcess,
      excessDelayMs: o.excessDelayMs,
      gcIntervalMs: o.gcIntervalMs,
      namespace: o.leaderElectionNamespace,
      identity: leaderIdentity(),
      logger: log,
      onLost: () => fatal('lost leadership'),
      onStartFailed: (err) => fatal(`start failed: ${(err as Error).message}`),
    });
    const server = await new HealthServer({
      host: o.metrics.host || '0.0.0.0',
      port: o.metrics.port,
      registry: operator.metrics.registry,
    }).listen();
    onSignals(async () => {
      await runner.stop();
      await server.close();
      transport.close();
    });
  });
}

/** Instance data from EC2's instance metadata service (IMDSv2), or from flags. */
export async function instanceFromImds(endpoint = 'http://169.254.169.254'): Promise<InstanceData> {
  const tok = await (
    await fetch(`${endpoint}/latest/api/token`, {
      method: 'PUT',
      headers: { 'X-aws-ec2-metadata-token-ttl-seconds': '60' },
      signal: AbortSignal.timeout(2000),
    })
  ).text();
  const get = async (p: string): Promise<string> => {
    const r = await fetch(`${endpoint}/latest/meta-data/${p}`, {
      headers: { 'X-aws-ec2-metadata-token': tok },
      signal: AbortSignal.timeout(2000),
    });
    if (!r.ok) throw new Error(`IMDS ${p}: HTTP ${r.status}`);
    return (await r.text()).trim();
  };
  const mac = await get('mac');
  return {
    instanceId: await get('instance-id'),
    instanceType: await get('instance-type'),
    availabilityZone: await get('placement/availability-zone'),
    vpcId: await get(`network/interfaces/macs/${mac}/vpc-id`),
    nodeSubnetId: await get(`network/interfaces/macs/${mac}/subnet-id`),
  };
}

export interface AgentFlags {
  kubeconfig?: string;
  nodeName: string;
  socket: string;
  imdsEndpoint: string;
  /** From flags; undefined = ask IMDSv2. */
  instance?: InstanceData;
  ipam: Omit<IpamSpec, 'pool'>;
  eni: EniSpec;
}

/** The agent's command line; throws CliError on a bad one. */
export function parseAgentFlags(argv: string[], env: NodeJS.ProcessEnv = process.env): AgentFlags {
  const p = new Command('cilium-eni-agent')
    .option('--kubeconfig <path>')
    .option('--node-name <name>', 'this node', env.NODE_NAME ?? os.hostname())
    .option('--socket <path>', 'UNIX socket for the IPAM plugin', '/run/cilium-eni-ipam/agent.sock')
    .option('--imds-endpoint <url>', 'instance metadata service', url, 'http://169.254.169.254')
    .option('--instance-id <id>')
    .option('--instance-type <t>')
    .option('--vpc-id <id>')
    .option('--availability-zone <az>')
    .option('--node-subnet-id <id>')
    .option('--pre-allocate <n>', 'spec.ipam.pre-allocate', int)
    .option('--min-allocate <n>', 'spec.ipam.min-allocate', int)
    .option('--max-allocate <n>', 'spec.ipam.max-allocate', int)
    .option('--max-above-watermark <n>', 'spec.ipam.max-above-watermark', int)
    .option('--first-interface-index <n>', 'spec.eni.first-interface-index', int)
    .option('--subnet-tags <k=v,...>', 'spec.eni.subnet-tags', tags)
    .option('--security-groups <ids>', 'spec.eni.security-groups (comma-separated)', list)
    .option('--use-prefix-delegation', 'ask for /28 prefixes', false);
  const o = parseWith(p, argv) as Record<string, never>;
  if (!o.nodeName) throw new CliError("option '--node-name <name>' must not be empty");
  if (!String(o.socket).startsWith('/'))
    throw new CliError(`option '--socket <path>' must be an absolute path, got ${JSON.stringify(o.socket)}`);
  let instance: InstanceData | undefined;
  if (o.instanceId) {
    const missing = (['instanceType', 'vpcId', 'availabilityZone'] as const)
      .filter((k) => !o[k])
      .map((k) => `--${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`);
    if (missing.length) throw new CliError(`--instance-id without IMDS needs ${missing.join(', ')}`);
    instance = {
      instanceId: o.instanceId,
      instanceType: o.instanceType,
      vpcId: o.vpcId,
      availabilityZone: o.availabilityZone,
      nodeSubnetId: o.nodeSubnetId,
    };
  } else {
    const stray = (['instanceType', 'vpcId', 'availabilityZone', 'nodeSubnetId'] as const).filter((k) => o[k] !== undefined);
    if (stray.length)
      throw new CliError(
        `--${stray[0]!.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} needs --instance-id (without it everything comes from IMDS)`,
      );
  }
  const min = o.minAllocate as number | undefined;
  const max = o.maxAllocate as number | undefined;
  if (min !== undefined && max !== undefined && max > 0 && min > max)
    throw new CliError(`--min-allocate ${min} is above --max-allocate ${max}`);
  return {
    kubeconfig: o.kubeconfig,
    nodeName: o.nodeName,
    socket: o.socket,
    imdsEndpoint: o.imdsEndpoint,
    instance,
    ipam: { 'pre-allocate': o.preAllocate, 'min-allocate': min, 'max-allocate': max, 'max-above-watermark': o.maxAboveWatermark },
    eni: {
      'first-interface-index': o.firstInterfaceIndex,
      'subnet-tags': o.subnetTags,
      'security-groups': o.securityGroups,
      'use-prefix-delegation': o.usePrefixDelegation || undefined,
    },
  };
}

export function agentMain(argv: string[]): Promise<void> {
  return cliMain('cilium-eni-agent', async () => {
    const o = parseAgentFlags(argv);
    const instance = o.instance ?? (await instanceFromImds(o.imdsEndpoint));
    const transport = connect({ kubeconfig: o.kubeconfig });
    const agent = new Agent({ transport, nodeName: o.nodeName, socketPath: o.socket, instance, ipam: o.ipam, eni: o.eni });
    await agent.start();
    await agent.waitForPool(10 * 60_000);
    onSignals(async () => {
      await agent.stop();
      transport.close();
    });
  });
}
