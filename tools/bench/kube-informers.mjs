// docs/kube.md's reason for an informer of our own: the same ConfigMap informer scenario (40 updates, the
// connection reset every 8th, the API server refused for 5 of them) run against @kubernetes/client-node's
// makeInformer, as its README shows it and with the restart-on-error its users add, and against @cnikit/kube's
// Informer, on a real kube-apiserver (tools/cluster/build.sh's binaries). Prints what each delivered.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { table } from './lib/measure.mjs';

export const title = 'kube informers: client-node makeInformer vs @cnikit/kube Informer, connections broken';
export const order = 95;

export async function run(ctx) {
  const { build } = await import('esbuild');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kube-informers-'));
  try {
    const script = path.join(dir, 'compare.js');
    await build({
      entryPoints: [path.join(ctx.root, 'tools/bench/lib/informer-compare.ts')],
      bundle: true,
      platform: 'node',
      target: 'node24',
      outfile: script,
      logLevel: 'warning',
    });
    // the kit's informer logs each reconnect as a warning on stderr: kept out of the report
    const r = spawnSync(ctx.node, [script, path.join(dir, 'cluster')], { encoding: 'utf8', timeout: 300_000 });
    if (r.status !== 0) return ctx.skip(`the comparison failed (exit ${r.status}): ${(r.stderr || '').split('\n').slice(-5).join(' ')}`);
    const rows = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    table(
      ['informer', 'resets', 'delivered /40', 'missed', 'repeated', 'LISTs', 'errors seen', 'caught up after last write'],
      rows.map((x) => [
        x.informer,
        x.resets,
        x.delivered,
        x.missed,
        x.repeated,
        x.lists,
        x.errors,
        x.caughtUpMs === null ? 'never (10 s)' : `${x.caughtUpMs} ms`,
      ]),
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
