// Lazy modules (declared in package.json "cnikit.lazyModules", lib/targets.mjs): a program's
// import() of one becomes a stub that, when the import runs, compiles the module from the
// executable's asset `lazy/<path from the root>.js` (runtime/lazy-module.ts). The module is
// bundled on its own with everything it imports, so a start that never takes that path neither
// reads nor compiles it: `doctor node --cloud`'s cloud SDKs cost every other doctor start
// (`doctor serve` on every node included) 1.22x the wall time and 40 MiB more when they were in
// doctor's bundle (docs/build.md, "Lazy modules").
// Code shared with the program (a retry helper) is a second copy with state of its own: a lazy
// module must not rely on module state of the program that imports it.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { bundleSource } from './bundle.mjs';
import { ascii, topLevelCache, wrap } from './chunks.mjs';

/** The asset a lazy module travels as, without its `.js` / `.cache` suffix. */
export const lazyAssetName = (root, file) => `lazy/${path.relative(root, file).split(path.sep).join('/')}`;

/**
 * An esbuild plugin turning each import() that resolves to a declared lazy module (`modules`, from
 * lib/targets.mjs) into the loading stub. A module `carried` by this executable is added to `used`
 * (lazyBundles makes its asset); any other one gets a stub that fails the import with a message saying
 * which image carries it. A static import of the same module is left alone.
 */
export function lazyPlugin(root, modules, carried, used) {
  const declared = new Map(modules.map((m) => [m.file, m]));
  const runtime = path.join(root, 'tools', 'build', 'runtime', 'lazy-module.ts');
  return {
    name: 'cnikit-lazy-modules',
    setup(build) {
      if (declared.size === 0) return;
      build.onResolve({ filter: /.*/ }, async (args) => {
        if (args.kind !== 'dynamic-import' || args.pluginData?.lazyProbe) return undefined;
        const r = await build.resolve(args.path, {
          kind: args.kind,
          importer: args.importer,
          resolveDir: args.resolveDir,
          pluginData: { lazyProbe: true },
        });
        if (r.errors.length > 0 || !declared.has(r.path)) return undefined;
        if (carried(declared.get(r.path))) used.add(r.path);
        return { path: r.path, namespace: 'cnikit-lazy' };
      });
      build.onLoad({ filter: /.*/, namespace: 'cnikit-lazy' }, (args) => {
        const name = lazyAssetName(root, args.path);
        const m = declared.get(args.path);
        const contents = used.has(args.path)
          ? `module.exports = require(${JSON.stringify(runtime)}).loadLazyModule(${JSON.stringify(name)});\n`
          : `throw new Error(${JSON.stringify(`${name}: not in this executable; ${m.pkg ? `the ${m.pkg} image carries it` : 'no build carries it'}`)});\n`;
        return { contents, resolveDir: root, loader: 'js' };
      });
    },
  };
}

/**
 * Bundles each used lazy module on its own, minified whatever the build's --minify: it runs once in the calls
 * that need it, where minified code costs nothing measurable, and the Alibaba Cloud SDK's 14.1 MB of source
 * shrinks to 6.6 MB in every image that carries doctor (docs/build.md, "Lazy modules").
 * @returns {Promise<{ inputs: string[], warnings: string[], parts: string[], prepare: (workDir: string, node: string) => Record<string, string> }>}
 *   `parts` identify the modules' code (build key); `prepare` writes the assets (source and top-level code cache).
 */
export async function lazyBundles(root, used) {
  const mods = [];
  for (const file of [...used].sort()) {
    const b = await bundleSource(root, true, `module.exports = require(${JSON.stringify(file)});\n`);
    mods.push({ name: lazyAssetName(root, file), code: wrap(ascii(b.code)), inputs: b.inputs, warnings: b.warnings });
  }
  return {
    inputs: mods.flatMap((m) => m.inputs),
    warnings: mods.flatMap((m) => m.warnings),
    parts: mods.map((m) => `${m.name}:${m.code.length}:${m.code}`),
    prepare(workDir, node) {
      const assets = {};
      for (const m of mods) {
        const base = path.join(workDir, m.name.replaceAll('/', '_'));
        fs.writeFileSync(`${base}.js`, m.code);
        topLevelCache(node, `${base}.js`, `${base}.cache`, `${m.name}.js`);
        assets[`${m.name}.js`] = `${base}.js`;
        assets[`${m.name}.cache`] = `${base}.cache`;
      }
      return assets;
    },
  };
}
