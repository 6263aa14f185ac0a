/**
 * gcp-ipam-installer: `install` (default) or `uninstall`. As a DaemonSet's main container, with the node's
 * /opt/cni/bin and /etc/cni/net.d mounted under /host:
 *   gcp-ipam-installer install --binary /app/gcp-ipam --host-prefix /host --bin-dir /host/opt/cni/bin \
 *     --conf /host/etc/cni/net.d --kubeconfig-out /host/etc/cni/net.d/gcp-ipam/gcp-ipam.kubeconfig --watch \
 *     --ipam '{"pool":"ippool-default","project":"p"}'
 * (nodeName and zone from $NODE_NAME and $GCP_ZONE). Prints a JSON report on stdout; with --watch, stays up and
 * logs one JSON line per change on stderr until SIGTERM/SIGINT. Exit 1 with the reason on stderr.
 */
import { parseArgs } from 'node:util';
import { inClusterServer } from '@cnikit/kube/lite';
import { changes, install, SERVICE_ACCOUNT_DIR, uninstall, watch, type InstallOptions } from '../installer';

const OPTIONS = {
  binary: { type: 'string' },
  'bin-dir': { type: 'string', default: '/home/kubernetes/bin' },
  conf: { type: 'string', default: '/etc/cni/net.d' },
  ipam: { type: 'string' },
  'replace-type': { type: 'string' },
  'host-prefix': { type: 'string', default: '' },
  'kubeconfig-out': { type: 'string' },
  'service-account-dir': { type: 'string', default: SERVICE_ACCOUNT_DIR },
  'node-name': { type: 'string' },
  zone: { type: 'string' },
  watch: { type: 'boolean', default: false },
  interval: { type: 'string', default: '10' },
} as const;

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>['values'];

const log = (event: Record<string, unknown>): void => {
  process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), ...event })}\n`);
};

function parseIpam(text: string | undefined): Record<string, unknown> {
  if (!text) throw new Error('--ipam (JSON of the ipam section) is required');
  let ipam: unknown;
  try {
    ipam = JSON.parse(text);
  } catch (err) {
    throw new Error(`--ipam: expected a JSON object, got ${JSON.stringify(text)} (${(err as Error).message})`, { cause: err });
  }
  if (typeof ipam !== 'object' || ipam === null || Array.isArray(ipam)) {
    throw new Error(`--ipam: expected a JSON object, got ${JSON.stringify(text)}`);
  }
  return ipam as Record<string, unknown>;
}

function parseInterval(text: string): number {
  const seconds = Number(text);
  if (!(seconds > 0)) throw new Error(`--interval: expected a number of seconds > 0, got ${JSON.stringify(text)}`);
  return seconds * 1000;
}

function installOptions(v: Values): InstallOptions {
  if (!v.binary) throw new Error('--binary is required');
  const out = v['kubeconfig-out'];
  return {
    binary: v.binary,
    binDir: v['bin-dir']!,
    conf: v.conf!,
    ipam: parseIpam(v.ipam),
    replaceType: v['replace-type'],
    hostPrefix: v['host-prefix'],
    kubeconfig: out ? { out, server: inClusterServer(), serviceAccountDir: v['service-account-dir'] } : undefined,
    nodeName: v['node-name'] ?? process.env.NODE_NAME,
    zone: v.zone ?? process.env.GCP_ZONE,
  };
}

/** Until SIGTERM (the kubelet stopping the pod) or SIGINT; the conflist and binary stay installed. */
async function watchUntilSignal(o: InstallOptions, intervalMs: number): Promise<void> {
  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals): void => {
    log({ event: 'stop', signal });
    stop.abort();
  };
  process.once('SIGTERM', onSignal).once('SIGINT', onSignal);
  await watch(o, { intervalMs, signal: stop.signal, log });
}

async function main(): Promise<void> {
  const { values: v, positionals } = parseArgs({ allowPositionals: true, options: OPTIONS });
  const cmd = positionals[0] ?? 'install';
  if (cmd === 'uninstall') {
    const report = uninstall({ binDir: v['bin-dir']!, conf: v.conf!, kubeconfigOut: v['kubeconfig-out'] });
    process.stdout.write(`${JSON.stringify(report)}\n`);
    return;
  }
  if (cmd !== 'install') throw new Error(`unknown command ${JSON.stringify(cmd)} (install | uninstall)`);
  const o = installOptions(v);
  const intervalMs = parseInterval(v.interval!); // checked before anything is written
  const report = install(o);
  process.stdout.write(`${JSON.stringify(report)}\n`);
  if (!v.watch) return;
  for (const c of changes(report)) log(c);
  await watchUntilSignal(o, intervalMs);
}

main().catch((err: unknown) => {
  process.stderr.write(`gcp-ipam-installer: ${(err as Error).message}\n`);
  process.exitCode = 1;
});
