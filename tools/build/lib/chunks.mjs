// CNI plugins in code-cache mode, alone or in a multi-call executable (cnikit's, an image's, where
// daemons and tools travel the same way, untrained): each program is
// bundled on its own and travels as the SEA asset `program/<name>.js`, with V8's code cache
// for it (`program/<name>.cache`); the executable's main script is only the launcher, which
// compiles the called program from those assets (tools/build/runtime/program-chunk.ts).
// - multi-call: one module graph for all programs would declare every module's functions at
//   the script's top level on every start (measured: +2.5 ms CPU, +250 page faults for
//   0.5 MiB of other programs' code); shared code (netlib) is repeated per program instead.
// - every CNI plugin: the cache is made by training calls (lib/train.mjs), so it holds the
//   functions a call runs, not only the top level that Node's own SEA code cache holds.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { bundleSource, launcherSource } from './bundle.mjs';

/** The function each program's bundle is wrapped in; the runtime calls it with its own require. */
export const wrap = (code) => `(function (require, module, exports, __filename, __dirname) {\n${code}\n})`;

/**
 * The launcher decodes a program asset as latin1, far cheaper than UTF-8, so the source must
 * be ASCII. esbuild escapes non-ASCII characters in strings, regular expressions and names,
 * but keeps comments as written (ip-address's JSDoc has "§" and "–"). A \uXXXX escape
 * means the same character in all of those places, and is harmless in a comment.
 */
// eslint-disable-next-line no-control-regex -- the ASCII range starts at NUL on purpose
export const ascii = (code) => code.replace(/[^\x00-\x7f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

/** Compiles with the pinned Node, as the executable will, and keeps V8's code cache (top level only). */
const CACHE_SCRIPT = `
const vm = require('node:vm'), fs = require('node:fs');
const [src, out, filename] = process.argv.slice(1);
fs.writeFileSync(out, new vm.Script(fs.readFileSync(src, 'latin1'), { filename }).createCachedData());
`;

/** Writes `cache`, V8's code cache of the top level of the wrapped source `js`, as the executable's Node makes it. */
export function topLevelCache(node, js, cache, filename) {
  const r = spawnSync(node, ['-e', CACHE_SCRIPT, js, cache, filename], { encoding: 'utf8', env: {} });
  if (r.status !== 0) throw new Error(`code cache of ${filename}: ${r.stderr}`);
}

/**
 * @param {{ minify: boolean, workDir: string, node: string, multicall: boolean, plugins?: object[],
 *           trainer?: { train(name: string, js: string): Promise<{ caches: Record<string, string>, how: string }> },
 *           log?: (m: string) => void }} opts
 *   trainer: makes trained caches, one per CNI command (lib/train.mjs), and says what it did;
 *   without it the cache holds the top level only.
 * @returns {Promise<{ code: string, inputs: string[], warnings: string[], parts: string[], prepare: () => Promise<Record<string, string>> }>}
 *   `parts` identify the program sources (build key); `prepare()` writes the assets and returns them.
 */
export async function programChunks(root, programs, { minify, workDir, node, multicall, plugins, trainer, log }) {
  const sources = [];
  const inputs = new Set();
  const warnings = [];
  for (const p of programs) {
    const b = await bundleSource(root, minify, `require(${JSON.stringify(p.entry)});\n`, plugins);
    sources.push({ name: p.name, cni: p.cni, code: wrap(ascii(b.code)) });
    b.inputs.forEach((i) => inputs.add(i));
    warnings.push(...b.warnings);
  }
  const start = (p) =>
    `require(${JSON.stringify(path.join(root, 'tools/build/runtime/program-chunk.ts'))}).runProgramChunk(${JSON.stringify(p.name)})`;
  const launch = await bundleSource(root, minify, launcherSource(root, programs, [], { multicall, snapshot: false, start }));
  const prepare = async () => {
    const assets = {};
    for (const s of sources) {
      const js = path.join(workDir, `program-${s.name}.js`);
      const cache = path.join(workDir, `program-${s.name}.cache`);
      fs.writeFileSync(js, s.code);
      assets[`program/${s.name}.js`] = js;
      // Training makes CNI calls; a daemon or a tool given one would start its work instead.
      const trained = s.cni ? await trainer?.train(s.name, js) : undefined;
      if (trained) {
        log?.(multicall ? `${s.name}: ${trained.how}` : trained.how);
        for (const [command, file] of Object.entries(trained.caches)) assets[`program/${s.name}.${command}.cache`] = file;
      }
      // Commands without a cache of their own use ADD's (runtime/program-chunk.ts); without
      // that, this one: VERSION's, or the top level when nothing was trained.
      if (!trained?.caches.ADD) {
        if (trained?.caches.VERSION) {
          fs.copyFileSync(trained.caches.VERSION, cache);
        } else {
          topLevelCache(node, js, cache, `${s.name}.js`);
        }
        assets[`program/${s.name}.cache`] = cache;
      }
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
