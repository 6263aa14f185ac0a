// Runs lib/chain-runner.mjs inside the benchmark's host netns and prints the chain
// table shared by veth-chain and router-chain: with vs without the meta-plugin, its
// ADD and DEL alone, all as ratios to the bare runtime start measured in the same run.
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { cacheFiles, median, ms, ratio, table } from './measure.mjs';

export function runChain(ctx, host, job, note) {
  const runner = path.join(import.meta.dirname, 'chain-runner.mjs');
  cacheFiles(ctx.node, ...Object.values(job.plugins));
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
  const linkDel = res.linkDel.slice(1);
  // The floor of a DEL that deletes a veth pair: the bare start plus the kernel's unregister, pair by pair.
  const unregisterFloor = linkDel.length > 0 ? median(linkDel.map((d, i) => (bare[i] + d) / bare[i])) : undefined;
  if (linkDel.length > 0) {
    const rest = median(w.map((t, i) => t.metaDel - linkDel[i]));
    console.log(
      `  the kernel's unregister of a veth pair (ip link del less ip link show; every plugin deleting a pair waits for it): ${ms(median(linkDel))};` +
        ` ${meta} DEL without it: ${ms(rest)}, ${ratio(rest / bareMed)} of node -e 0`,
    );
  }
  // The first CPU pair warmed caches too.
  const b = res.cpu.b.slice(1);
  const cpuOf = (xs) => (xs.length > 0 && xs.every(Number.isFinite) ? { a: xs, b, ratios: xs.map((x, i) => x / b[i]) } : undefined);
  const cpu = { add: cpuOf(res.cpu.add.slice(1)), del: cpuOf(res.cpu.del.slice(1)) };
  for (const [verb, c] of Object.entries(cpu))
    if (c)
      console.log(
        `  ${meta} ${verb.toUpperCase()} CPU time (perf stat task-clock): ${ms(median(c.a))} vs node -e 0 ${ms(median(b))}: ${ratio(median(c.ratios))}`,
      );
  const wall = (key) => ({ a: w.map((t) => t[key]), b: bare, ratios: w.map((t, i) => t[key] / bare[i]) });
  return { add: wall('metaAdd'), del: wall('metaDel'), cpu, unregisterFloor };
}
