// The multi-call executable in code-cache mode. One module graph for all programs
// would declare every module's functions at the script's top level on every start
// (measured: +2.5 ms CPU, +250 page faults for 0.5 MiB of other programs' code), so
// each program is bundled on its own and travels as the SEA asset
// `program/<name>.js`, with V8's code cache for it (`program/<name>.cache`, made here
// with the pinned Node). The executable's main script is only the launcher, which
// compiles the called program from those assets (tools/build/runtime/program-chunk.ts).
// Shared code (netlib) is repeated per program: bytes in a 109 MB file.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { bundleSource, launcherSource } from './bundle.mjs';

/** The function each program's bundle is wrapped in; the runtime calls it with its own require. */
const wrap = (code) => `(function (require, module, exports, __filename, __dirname) {\n${code}\n})`;

/** Compiles with the pinned Node, as the executable will, and keeps V8's code cache. */
const CACHE_SCRIPT = `
const vm = require('node:vm'), fs = require('node:fs');
const [src, out, filename] = process.argv.slice(1);
fs.writeFileSync(out, new vm.Script(fs.readFileSync(src, 'utf8'), { filename }).createCachedData());
`;

/**
 * @returns {Promise<{ code: string, inputs: string[], warnings: string[], parts: string[], prepare: () => Record<string, string> }>}
 *   `parts` identify the program sources (build key); `prepare()` writes the assets and returns them.
 */
export async function multicallBundle(root, programs, { minify, workDir, node }) {
  const sources = [];
  const inputs = new Set();
  const warnings = [];
  for (const p of programs) {
    const b = await bundleSource(root, minify, `require(${JSON.stringify(p.entry)});\n`);
    sources.push({ name: p.name, code: wrap(b.code) });
    b.inputs.forEach((i) => inputs.add(i));
    warnings.push(...b.warnings);
  }
  const start = (p) => `require(${JSON.stringify(path.join(root, 'tools/build/runtime/program-chunk.ts'))}).runProgramChunk(${JSON.stringify(p.name)})`;
  const launch = await bundleSource(root, minify, launcherSource(root, programs, [], { multicall: true, snapshot: false, start }));
  const prepare = () => {
    const assets = {};
    for (const s of sources) {
      const js = path.join(workDir, `program-${s.name}.js`);
      const cache = path.join(workDir, `program-${s.name}.cache`);
      fs.writeFileSync(js, s.code);
      const r = spawnSync(node, ['-e', CACHE_SCRIPT, js, cache, `${s.name}.js`], { encoding: 'utf8', env: {} });
      if (r.status !== 0) throw new Error(`code cache of ${s.name}: ${r.stderr}`);
      assets[`program/${s.name}.js`] = js;
      assets[`program/${s.name}.cache`] = cache;
    }
    return assets;
  };
  return {
    code: launch.code,
    inputs: [...inputs, ...launch.inputs],
    warnings: [...warnings, ...launch.warnings],
    parts: sources.map((s) => `${s.name}:${createHash('sha256').update(s.code).digest('hex')}`),
    prepare,
  };
}
