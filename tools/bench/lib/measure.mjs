// Measuring helpers shared by the benchmark modules. Figures are printed, never
// asserted: the machine is shared and noisy, so every comparison is made side by
// side in one run (A/B alternated, medians, per-pair ratios).
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/**
 * @typedef {{ file: string, args?: string[], env?: Record<string, string>, input?: string, argv0?: string }} Cmd
 */

/** Runs cmd once; returns wall time in ms. Throws if it fails: a broken binary has no meaningful time. */
export function timeOnce(cmd) {
  const t0 = process.hrtime.bigint();
  const r = spawnSync(cmd.file, cmd.args ?? [], { env: cmd.env ?? {}, input: cmd.input ?? '', argv0: cmd.argv0, encoding: 'utf8' });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  // EPIPE: the program exited without reading its stdin (Go plugins ignore it on VERSION).
  if (r.error && r.error.code !== 'EPIPE') throw r.error;
  if (r.status !== 0) throw new Error(`${cmd.file} exited ${r.status ?? r.signal}: ${r.stderr || r.stdout}`.trim());
  return ms;
}

export const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/**
 * A distribution-free interval for the median of `xs`, with at least 95% confidence: the k-th smallest and
 * k-th largest values, k the largest rank with P(Binomial(n, 1/2) < k) <= 2.5%. Undefined below 6 values.
 * It says whether a median near a target's limit is on its side of the limit or within the noise.
 */
export function medianInterval(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  let below = 0; // P(X < k), X ~ Binomial(n, 1/2)
  let term = 0.5 ** n; // P(X = k - 1), starting at k = 1
  let k = 0;
  for (let i = 0; i < n; i++) {
    if (below + term > 0.025) break;
    below += term;
    k = i + 1;
    term = (term * (n - i)) / (i + 1);
  }
  return k === 0 ? undefined : [s[k - 1], s[n - k]];
}

/**
 * Reads each file whole, so the page cache holds all of it, as it does for a program a node runs every few
 * seconds. Without it an executable idle for a minute starts slower than the runtime it is compared with:
 * this machine kind's DAMON pages out page cache unused for ~60 s (docs/build.md), and a start that faults
 * on a file with holes in the cache maps fewer pages per fault (fault-around maps only cached pages).
 */
export function cacheFiles(...files) {
  const buf = Buffer.allocUnsafe(1 << 20);
  for (const file of new Set(files)) {
    const fd = fs.openSync(file, 'r');
    try {
      while (fs.readSync(fd, buf, 0, buf.length, null) > 0);
    } finally {
      fs.closeSync(fd);
    }
  }
}

/**
 * A/B in alternating order (AB, BA, AB...) so drift and order effects hit both alike;
 * both files read whole first, then one untimed warm-up of each (page cache).
 * @returns {{ a: number[], b: number[], ratios: number[] }} ratios are a/b per pair
 */
export function alternate(a, b, runs) {
  cacheFiles(a.file, b.file);
  timeOnce(a);
  timeOnce(b);
  const out = { a: [], b: [], ratios: [] };
  for (let i = 0; i < runs; i++) {
    let ta, tb;
    if (i % 2 === 0) {
      ta = timeOnce(a);
      tb = timeOnce(b);
    } else {
      tb = timeOnce(b);
      ta = timeOnce(a);
    }
    out.a.push(ta);
    out.b.push(tb);
    out.ratios.push(ta / tb);
  }
  return out;
}

/**
 * CPU time (task-clock: user + system of every thread) in ms of one run, from perf stat;
 * undefined without perf. Wall times on this shared machine swing with other jobs; CPU time
 * far less, so the target rows print both.
 */
export function cpuOnce(cmd) {
  if (!fs.existsSync('/usr/bin/perf')) return undefined;
  const r = spawnSync('/usr/bin/perf', ['stat', '-x,', '-e', 'task-clock', cmd.file, ...(cmd.args ?? [])], {
    env: cmd.env ?? {},
    input: cmd.input ?? '',
    argv0: cmd.argv0,
    encoding: 'utf8',
  });
  if (r.error && r.error.code !== 'EPIPE') throw r.error;
  if (r.status !== 0) throw new Error(`${cmd.file} exited ${r.status ?? r.signal}: ${r.stderr || r.stdout}`.trim());
  const m = /^([0-9.]+),msec,task-clock/m.exec(r.stderr);
  return m ? Number(m[1]) : undefined;
}

/** Like alternate(), CPU time instead of wall time; undefined without perf. */
export function alternateCpu(a, b, runs) {
  cacheFiles(a.file, b.file);
  if (cpuOnce(a) === undefined) return undefined;
  cpuOnce(b);
  const out = { a: [], b: [], ratios: [] };
  for (let i = 0; i < runs; i++) {
    const [ta, tb] = i % 2 === 0 ? [cpuOnce(a), cpuOnce(b)] : [cpuOnce(b), cpuOnce(a)].reverse();
    out.a.push(ta);
    out.b.push(tb);
    out.ratios.push(ta / tb);
  }
  return out;
}

/** Peak RSS in KiB of one run, from GNU time's %M (wait4's ru_maxrss). */
export function peakRssKiB(cmd) {
  const report = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'bench-rss-')), 'rss');
  try {
    const r = spawnSync('/usr/bin/time', ['-f', '%M', '-o', report, cmd.file, ...(cmd.args ?? [])], {
      env: cmd.env ?? {},
      input: cmd.input ?? '',
      encoding: 'utf8',
    });
    if (r.error) throw r.error;
    if (r.status !== 0) throw new Error(`${cmd.file} exited ${r.status}: ${r.stderr}`);
    return Number(fs.readFileSync(report, 'utf8').trim().split('\n').pop());
  } finally {
    fs.rmSync(path.dirname(report), { recursive: true, force: true });
  }
}

export const ms = (x) => `${x.toFixed(1)} ms`;
export const mib = (kib) => `${(kib / 1024).toFixed(1)} MiB`;

/** Whether a figure is within its target (a limit to stay under): "met", or by how much it is missed. */
export const verdict = (x, limit) => (x <= limit ? 'met' : `missed by ${ratio(x / limit)}`);
export const mb = (bytes) => `${(bytes / 1e6).toFixed(1)} MB`;
export const ratio = (x) => `${x.toFixed(2)}x`;

/** Prints rows as aligned columns. */
export function table(header, rows) {
  const all = [header, ...rows];
  const w = header.map((_, i) => Math.max(...all.map((r) => String(r[i]).length)));
  for (const r of all)
    console.log(
      '  ' +
        r
          .map((c, i) => String(c).padEnd(w[i]))
          .join('  ')
          .trimEnd(),
    );
}

/**
 * Mean CPU time (task-clock: user + system of every thread) in ms over `runs` runs, from
 * perf stat; undefined without perf. Far less sensitive than wall time to other jobs
 * sharing the machine, so it decides between build variants when wall times are noisy.
 */
export function cpuMs(cmd, runs) {
  if (!fs.existsSync('/usr/bin/perf')) return undefined;
  const r = spawnSync('/usr/bin/perf', ['stat', '-x,', '-e', 'task-clock', '-r', String(runs), cmd.file, ...(cmd.args ?? [])], {
    env: cmd.env ?? {},
    input: cmd.input ?? '',
    encoding: 'utf8',
  });
  const line = r.stderr.split('\n').find((l) => l.includes('task-clock'));
  return line ? Number(line.split(',')[0]) : undefined;
}
