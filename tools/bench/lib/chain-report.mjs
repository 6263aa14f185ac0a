// Runs lib/chain-runner.mjs inside the benchmark's host netns and prints the chain
// table shared by veth-chain and router-chain: with vs without the meta-plugin, its
// ADD and DEL alone, all as ratios to the bare runtime start measured in the same run.
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { median, ms, ratio, table } from './measure.mjs';

export function runChain(ctx, host, job, note) {
  const runner = path.join(import.meta.dirname, 'chain-runner.mjs');
  const r = spawnSync('ip', ['netns', 'exec', host, ctx.node, runner, JSON.stringify(job)], { encoding: 'utf8', maxBuffer: 16 << 20 });
  if (r.status !== 0) throw new Error(`chain runner failed: ${r.stderr}`);
  const res = JSON.parse(r.stdout);
  // the first pair warmed page caches: drop it
  const w = res.withMeta.slice(1),
    wo = res.without.slice(1),
    bare = res.bare.slice(1);
  const withMed = median(w.map((t) => t.total));
  const withoutMed = median(wo.map((t) => t.total));
  const bareMed = median(bare);
  const addMed = median(w.map((t) => t.metaAdd));
  const delMed = median(w.map((t) => t.metaDel));
  const addsMed = median(w.map((t, i) => t.total - wo[i].total));
  const meta = job.meta;
  table(
    ['what', 'median', 'ratio to node -e 0'],
    [
      [`macvlan+host-local+${meta} ADD+DEL`, ms(withMed), ratio(withMed / bareMed)],
      ['macvlan+host-local ADD+DEL (Go only)', ms(withoutMed), ratio(withoutMed / bareMed)],
      [`what ${meta} adds (median of per-pair differences)`, ms(addsMed), ratio(addsMed / bareMed)],
      [`${meta} ADD alone`, ms(addMed), ratio(addMed / bareMed)],
      [`${meta} DEL alone`, ms(delMed), ratio(delMed / bareMed)],
      ['node -e 0 (bare runtime start)', ms(bareMed), '1.00x'],
    ],
  );
  console.log(`  (medians of ${w.length} alternating runs, ${note})`);
  // The first CPU pair warmed caches too.
  const cpuA = res.cpu.a.slice(1),
    cpuB = res.cpu.b.slice(1);
  const cpu = cpuA.length > 0 && cpuA.every(Number.isFinite) ? { a: cpuA, b: cpuB, ratios: cpuA.map((x, i) => x / cpuB[i]) } : undefined;
  if (cpu)
    console.log(
      `  ${meta} ADD CPU time (perf stat task-clock): ${ms(median(cpuA))} vs node -e 0 ${ms(median(cpuB))}: ${ratio(median(cpu.ratios))}`,
    );
  return { add: { a: w.map((t) => t.metaAdd), b: bare, ratios: w.map((t, i) => t.metaAdd / bare[i]) }, cpu };
}
