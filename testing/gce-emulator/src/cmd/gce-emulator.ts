/**
 * gce-emulator: the GCE compute + metadata emulator as a program, for a user rehearsing an outage or a node-tier
 * test driving it from outside (`npm run gce-emulator -- --help`). The instances and subnets of the flags exist
 * at start; the control API (/_emulator/, emulator.ts) adds more, injects errors and changes the operation
 * duration and the rate quotas while it runs. --on-alias-add / --on-alias-remove run a shell command when an operation
 * has put an alias range on a VM or taken it off (ALIAS_RANGE, INSTANCE, ZONE, NETWORK_IP in its environment): a
 * lab routes the range to the VM there, as the VPC does. Prints its URL on stdout once it listens; stops on SIGTERM or SIGINT.
 */
import { execFile } from 'node:child_process';
import { Command, InvalidArgumentError } from 'commander';
import { FakeGce, type AliasChange, type QuotaGroup } from '../emulator';

/** Compute Engine's default rate quotas (per project, per minute) of the groups emulated: what the program applies. */
const DEFAULT_QUOTAS: Record<QuotaGroup, number> = { default: 1500, read_requests: 1500, operation_read_requests: 1500 };

const collect = (v: string, all: string[]): string[] => [...all, v];
const number = (v: string): number => {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new InvalidArgumentError('a number >= 0 expected');
  return n;
};

/** `zone/name[=networkIP]`, `region/name=cidr`: the flags' one format for a place and what it holds. */
function placed(v: string, what: string): { where: string; name: string; value?: string } {
  const m = /^([a-z0-9-]+)\/([a-z0-9-]+)(?:=(.+))?$/.exec(v);
  if (!m) throw new Error(`${what} ${JSON.stringify(v)}: <where>/<name>[=<value>] expected`);
  return { where: m[1]!, name: m[2]!, value: m[3] };
}

const program = new Command('gce-emulator')
  .description('GCE compute (instances, operations, subnetworks), internalRanges and metadata emulator')
  .option('--listen <host:port>', 'where to listen', '127.0.0.1:8089')
  .option('--project <id>', 'the project', 'test-project')
  .option('--op-duration-ms <ms>', 'how long an updateNetworkInterface operation runs (GCE: about 3 s)', number, 3000)
  .option(
    '--quota <group=N>',
    'a rate quota per minute: default, read_requests, operation_read_requests (repeatable; default 1500 each)',
    collect,
    [],
  )
  .option('--no-rate-limits', 'no rate quota at all')
  .option('--instance <zone/name[=ip]>', 'an instance with nic0 (repeatable)', collect, [])
  .option('--subnet <region/name=cidr>', 'a subnetwork (repeatable)', collect, [])
  .option('--on-alias-add <command>', 'shell command run when an alias range is on a VM (the VPC routes it there)')
  .option('--on-alias-remove <command>', 'shell command run when an alias range has left a VM')
  .parse();

const o = program.opts<{
  listen: string;
  project: string;
  opDurationMs: number;
  quota: string[];
  rateLimits: boolean;
  instance: string[];
  subnet: string[];
  onAliasAdd?: string;
  onAliasRemove?: string;
}>();

/** Runs the alias hook of a change with it in the environment; a failure is logged and kept in the state. */
function aliasHook(c: AliasChange): Promise<void> {
  const command = c.kind === 'add' ? o.onAliasAdd : o.onAliasRemove;
  if (!command) return Promise.resolve();
  const env = { ...process.env, ALIAS_RANGE: c.range, INSTANCE: c.instance, ZONE: c.zone, NETWORK_IP: c.networkIP };
  return new Promise((resolve, reject) =>
    execFile('sh', ['-c', command], { env }, (err, _out, stderr) => {
      if (!err) return resolve();
      process.stderr.write(`gce-emulator: --on-alias-${c.kind} for ${c.range} on ${c.instance}: ${stderr || err.message}\n`);
      reject(new Error(stderr || err.message));
    }),
  );
}

const gce = new FakeGce({ project: o.project, opDurationMs: o.opDurationMs, onAliasChange: aliasHook });
try {
  const quotas: Record<string, number> = { ...DEFAULT_QUOTAS };
  for (const q of o.quota) {
    const m = /^(default|read_requests|operation_read_requests)=(\d+)$/.exec(q);
    if (!m) throw new Error(`--quota ${JSON.stringify(q)}: <default|read_requests|operation_read_requests>=<per minute> expected`);
    quotas[m[1]!] = Number(m[2]);
  }
  if (o.rateLimits) for (const [group, perMinute] of Object.entries(quotas)) gce.setQuota(group as QuotaGroup, perMinute);
  for (const i of o.instance.map((v) => placed(v, '--instance'))) gce.addInstance(i.where, i.name, i.value);
  for (const s of o.subnet.map((v) => placed(v, '--subnet'))) {
    if (!s.value) throw new Error(`--subnet ${s.where}/${s.name}: =<cidr> expected`);
    gce.addSubnet(s.where, s.name, s.value);
  }
} catch (err) {
  program.error(`gce-emulator: ${(err as Error).message}`, { exitCode: 2 });
}
const at = o.listen.lastIndexOf(':');
gce
  .start(Number(o.listen.slice(at + 1)), o.listen.slice(0, at) || '127.0.0.1')
  .then((url) => {
    process.stdout.write(`${url}\n`);
    for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => void gce.stop().then(() => process.exit(0)));
  })
  .catch((err: unknown) => {
    process.stderr.write(`gce-emulator: ${(err as Error).message}\n`);
    process.exit(1);
  });
