/**
 * aliyun-emulator: the Alibaba Cloud ECS/VPC OpenAPI and instance metadata emulator as a program, for a user
 * rehearsing an outage or a node-tier test driving it from outside (`npm run aliyun-emulator -- --help`).
 * The vSwitches, instance types and instances of the flags exist at start; the control API (/_emulator/,
 * emulator.ts) adds more, injects errors and changes latency, rate limits and visibility while it runs.
 * --on-attach / --on-detach run a shell command per ENI (ENI_ID, ENI_MAC, INSTANCE_ID, DEVICE_INDEX,
 * PRIMARY_IP in its environment): how an ENI appears on a node as a link. --on-ip-assign / --on-ip-unassign run
 * one when private IPs join or leave a secondary ENI (ENI_ID, ENI_MAC, IPS space-separated), one at a time in the
 * API's order: how the VPC delivers each address to its ENI. Prints the endpoint (host:port, the
 * client's `ecsEndpoint` / `vpcEndpoint`) on stdout once it listens; stops on SIGTERM or SIGINT.
 */
import { execFile } from 'node:child_process';
import { Command, InvalidArgumentError } from 'commander';
import { FakeOpenApi, type AddressChange, type FakeEni } from '../emulator';

/** ECS's published API rate limits the issue names, per minute: what the program applies unless told otherwise. */
const PUBLISHED_LIMITS_PER_MIN: Record<string, number> = {
  CreateNetworkInterface: 500,
  AssignPrivateIpAddresses: 400,
  DescribeNetworkInterfaces: 800,
};

const collect = (v: string, all: string[]): string[] => [...all, v];
const number = (v: string): number => {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new InvalidArgumentError('a number >= 0 expected');
  return n;
};

function parts(v: string, re: RegExp, what: string): string[] {
  const m = re.exec(v);
  if (!m) throw new Error(`${what} ${JSON.stringify(v)}: ${re.source} expected`);
  return m.slice(1);
}

const program = new Command('aliyun-emulator')
  .description('Alibaba Cloud ECS (2014-05-26) / VPC (2016-04-28) OpenAPI and instance metadata emulator')
  .option('--listen <host:port>', 'where to listen', '127.0.0.1:8090')
  .option('--region <id>', 'the region', 'cn-hangzhou')
  .option('--access-key <id=secret>', 'an AccessKey pair the V3 signatures are checked with (repeatable)', collect, [])
  .option('--vswitch <id/zone=cidr>', 'a vSwitch (repeatable)', collect, [])
  .option('--instance-type <name=enis,ips>', 'an instance type: EniQuantity, EniPrivateIpAddressQuantity (repeatable)', collect, [])
  .option('--instance <id:type:vswitch[:ip]>', 'an instance with its primary ENI, at ip when given (repeatable)', collect, [])
  .option('--attach-delay-ms <ms>', 'how long an attach or detach takes', number, 30)
  .option('--latency-ms <ms>', 'latency added to every call', number, 0)
  .option('--visible-after-ms <ms>', 'how long a created ENI stays out of DescribeNetworkInterfaces', number, 0)
  .option('--rate-limit <Action=N/min>', "an action's limit (repeatable; default: ECS's published limits)", collect, [])
  .option('--no-rate-limits', 'no rate limit at all')
  .option('--on-attach <command>', 'shell command run when an ENI is attached, before it shows InUse')
  .option('--on-detach <command>', 'shell command run when an ENI is detached')
  .option('--on-ip-assign <command>', 'shell command run when private IPs join a secondary ENI (IPS, ENI_ID, ENI_MAC)')
  .option('--on-ip-unassign <command>', 'shell command run when private IPs leave a secondary ENI (IPS, ENI_ID, ENI_MAC)')
  .parse();

interface Flags {
  listen: string;
  region: string;
  accessKey: string[];
  vswitch: string[];
  instanceType: string[];
  instance: string[];
  attachDelayMs: number;
  latencyMs: number;
  visibleAfterMs: number;
  rateLimit: string[];
  rateLimits: boolean;
  onAttach?: string;
  onDetach?: string;
  onIpAssign?: string;
  onIpUnassign?: string;
}

function sh(command: string, env: NodeJS.ProcessEnv): Promise<void> {
  return new Promise((resolve, reject) =>
    execFile('sh', ['-c', command], { env: { ...process.env, ...env } }, (err, _out, stderr) =>
      err ? reject(new Error(`${command}: ${stderr || err.message}`)) : resolve(),
    ),
  );
}

/** Runs a hook with the ENI in its environment; its failure is the attach's failure, as a real one would be. */
const hook =
  (command: string | undefined) =>
  (eni: FakeEni): Promise<void> | void => {
    if (!command) return;
    return sh(command, {
      ENI_ID: eni.id,
      ENI_MAC: eni.mac,
      INSTANCE_ID: eni.instanceId ?? '',
      DEVICE_INDEX: String(eni.deviceIndex ?? ''),
      PRIMARY_IP: eni.primaryIp,
    });
  };

/**
 * The address hooks, one at a time in the order the API changed the addresses (an address unassigned from one ENI
 * and assigned to another must end on the second). A failure is printed: the API call has answered already.
 */
function addressHooks(onAssign: string | undefined, onUnassign: string | undefined): ((c: AddressChange) => void) | undefined {
  if (!onAssign && !onUnassign) return undefined;
  let queue = Promise.resolve();
  const one = (command: string | undefined, eni: FakeEni, ips: string[]): void => {
    if (!command || ips.length === 0) return;
    queue = queue
      .then(() => sh(command, { ENI_ID: eni.id, ENI_MAC: eni.mac, IPS: ips.join(' ') }))
      .catch((err: unknown) => void process.stderr.write(`aliyun-emulator: ${(err as Error).message}\n`));
  };
  return (c) => {
    one(onUnassign, c.eni, c.removed);
    one(onAssign, c.eni, c.added);
  };
}

function emulator(o: Flags): FakeOpenApi {
  const accessKeys = o.accessKey.length
    ? Object.fromEntries(o.accessKey.map((v) => parts(v, /^([^=]+)=(.+)$/, '--access-key')))
    : undefined;
  const api = new FakeOpenApi({
    regionId: o.region,
    accessKeys,
    attachDelayMs: o.attachDelayMs,
    latencyMs: o.latencyMs,
    visibleAfterMs: o.visibleAfterMs,
    onAttached: hook(o.onAttach),
    onDetached: hook(o.onDetach),
    onAddresses: addressHooks(o.onIpAssign, o.onIpUnassign),
  });
  for (const v of o.vswitch) {
    const [id, zone, cidr] = parts(v, /^([^/]+)\/([^=]+)=(.+)$/, '--vswitch');
    api.addVSwitch(id!, zone!, cidr!);
  }
  for (const t of o.instanceType) {
    const [name, enis, ips] = parts(t, /^([^=]+)=(\d+),(\d+)$/, '--instance-type');
    api.addInstanceType(name!, { eniQuantity: Number(enis), eniPrivateIpAddressQuantity: Number(ips) });
  }
  for (const i of o.instance) {
    const [id, type, vswitch, primaryIp] = parts(i, /^([^:]+):([^:]+):([^:]+)(?::(\d+\.\d+\.\d+\.\d+))?$/, '--instance');
    api.addInstance(id!, type!, vswitch!, primaryIp);
  }
  const limits = o.rateLimit.length
    ? Object.fromEntries(o.rateLimit.map((v) => parts(v, /^(\w+)=(\d+)\/min$/, '--rate-limit')).map(([a, n]) => [a!, Number(n)]))
    : PUBLISHED_LIMITS_PER_MIN;
  if (o.rateLimits) for (const [action, perMin] of Object.entries(limits)) api.rateLimit(action, perMin, 60_000);
  return api;
}

const o = program.opts<Flags>();
let api: FakeOpenApi;
try {
  api = emulator(o);
} catch (err) {
  program.error(`aliyun-emulator: ${(err as Error).message}`, { exitCode: 2 });
}
const at = o.listen.lastIndexOf(':');
api!
  .listen(Number(o.listen.slice(at + 1)), o.listen.slice(0, at) || '127.0.0.1')
  .then((endpoint) => {
    process.stdout.write(`${endpoint}\n`);
    for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => void api.close().then(() => process.exit(0)));
  })
  .catch((err: unknown) => {
    process.stderr.write(`aliyun-emulator: ${(err as Error).message}\n`);
    process.exit(1);
  });
