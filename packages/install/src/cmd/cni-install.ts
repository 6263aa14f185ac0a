/**
 * cni-install: the install step of a cnikit image (init container of its DaemonSet). See docs/images.md.
 */
import { Command } from 'commander';
import { install } from '../install';

const cmd = new Command('cni-install')
  .description("copy this image's executable into the node's CNI bin dir, link the plugins' names to it, write the conflist last")
  .requiredOption('--programs <names>', 'CNI plugin names to link, comma-separated (e.g. coil, or veth,router)')
  .option('--bin-dir <dir>', "the node's CNI bin dir, as mounted", '/host/opt/cni/bin')
  .option('--conflist <file>', 'a conflist to install (e.g. from a ConfigMap)')
  .option('--conf-dir <dir>', "the node's CNI conf dir, as mounted", '/host/etc/cni/net.d')
  .option('--conf-name <name>', 'file name in the conf dir (default: the conflist file name)')
  .option('--sleep', "then stay running until SIGTERM (a DaemonSet's only container: nothing else to run)", false)
  .parse();
const o = cmd.opts<{ programs: string; binDir: string; conflist?: string; confDir: string; confName?: string; sleep: boolean }>();

try {
  install({
    executable: process.execPath,
    binDir: o.binDir,
    programs: o.programs.split(',').filter(Boolean),
    conflist: o.conflist ? { file: o.conflist, confDir: o.confDir, name: o.confName } : undefined,
    log: (m) => process.stderr.write(`cni-install: ${m}\n`),
  });
  if (o.sleep) {
    const timer = setInterval(() => undefined, 1 << 30);
    process.once('SIGTERM', () => clearInterval(timer));
  }
} catch (err) {
  process.stderr.write(`cni-install: ${(err as Error).message}\n`);
  process.exitCode = 1;
}
