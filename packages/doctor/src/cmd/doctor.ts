/**
 * doctor: explains a node's pod networking (docs/doctor.md). `doctor conf` lints the CNI conf dir as the
 * runtime will read it: exit 0 when the runtime can use it, 1 when it cannot (or will fail on some call).
 */
import { Command } from 'commander';
import { formatReports, hasErrors, lintConfDir } from '../conf';

const program = new Command('doctor').description("explain a node's pod networking");

program
  .command('conf')
  .description("lint the node's CNI network configs: each plugin found and asked VERSION as the runtime asks it")
  .option('--conf-dir <dir>', 'the CNI conf dir', '/etc/cni/net.d')
  .option('--bin-dir <dirs>', 'the CNI bin dirs, colon-separated', '/opt/cni/bin')
  .option('-o, --output <format>', 'table or json', 'table')
  .action(async (o: { confDir: string; binDir: string; output: string }) => {
    if (!['table', 'json'].includes(o.output)) program.error(`doctor: --output must be table or json, not ${o.output}`, { exitCode: 2 });
    const reports = await lintConfDir({ confDir: o.confDir, binDirs: o.binDir.split(':').filter(Boolean) });
    process.stdout.write(
      o.output === 'json' ? `${JSON.stringify({ confDir: o.confDir, files: reports }, null, 2)}\n` : formatReports(reports, o.confDir),
    );
    process.exitCode = hasErrors(reports) ? 1 : 0;
  });

program.parseAsync().catch((err: unknown) => {
  process.stderr.write(`doctor: ${(err as Error).message}\n`);
  process.exitCode = 2;
});
