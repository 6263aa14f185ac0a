/**
 * gcp-ipam-installer: `install` (default) or `uninstall`.
 *   gcp-ipam-installer install --binary /app/gcp-ipam --bin-dir /home/kubernetes/bin --conf /etc/cni/net.d \
 *     --ipam '{"kubeconfig":"/etc/cni/net.d/gcp-ipam.kubeconfig","pool":"ippool-default","project":"p","zone":"z"}'
 * Prints a JSON report on stdout; exit 1 with the reason on stderr.
 */
import { parseArgs } from 'node:util';
import { install, uninstall } from '../installer';

function main(): void {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      binary: { type: 'string' },
      'bin-dir': { type: 'string', default: '/home/kubernetes/bin' },
      conf: { type: 'string', default: '/etc/cni/net.d' },
      ipam: { type: 'string' },
      'replace-type': { type: 'string' },
    },
  });
  const cmd = positionals[0] ?? 'install';
  if (cmd === 'uninstall') {
    process.stdout.write(`${JSON.stringify(uninstall({ binDir: values['bin-dir']!, conf: values.conf! }))}\n`);
    return;
  }
  if (cmd !== 'install') throw new Error(`unknown command ${JSON.stringify(cmd)} (install | uninstall)`);
  if (!values.binary) throw new Error('--binary is required');
  if (!values.ipam) throw new Error('--ipam (JSON of the ipam section) is required');
  const ipam = JSON.parse(values.ipam) as Record<string, unknown>;
  const report = install({
    binary: values.binary,
    binDir: values['bin-dir']!,
    conf: values.conf!,
    ipam,
    replaceType: values['replace-type'],
  });
  process.stdout.write(`${JSON.stringify(report)}\n`);
}

try {
  main();
} catch (err) {
  process.stderr.write(`gcp-ipam-installer: ${(err as Error).message}\n`);
  process.exitCode = 1;
}
