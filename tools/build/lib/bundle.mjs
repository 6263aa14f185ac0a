// esbuild side of the build: one CommonJS bundle per executable, holding the
// launcher (tools/build/runtime/launcher.ts), every program it can start and
// every workspace package they import, compiled from TypeScript sources.
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as esbuild from 'esbuild';

/** Options shared by both passes; node24 is the runtime embedded in every executable. */
function baseOptions(root, minify, plugins = []) {
  return {
    absWorkingDir: root,
    bundle: true,
    platform: 'node',
    target: 'node24',
    format: 'cjs',
    minify,
    tsconfig: path.join(root, 'tsconfig.base.json'), // paths: @cnikit/* -> packages/*/src
    // Only netlib's dev-mode addon lookup asks for it; executables load addons from assets.
    external: ['netlink/package.json'],
    write: false,
    metafile: true,
    logLevel: 'silent',
    plugins: [addonShim(root), netlinkUtilShim(root), ...plugins],
  };
}

/**
 * Sends the netlink package's `require('node-gyp-build')` to our lazy shim. Any other
 * package loading an addon that way fails the build: it would need an asset too.
 */
function addonShim(root) {
  const shim = path.join(root, 'tools', 'build', 'runtime', 'node-gyp-build.ts');
  const netlink = `${path.sep}node_modules${path.sep}netlink${path.sep}`;
  return {
    name: 'cnikit-addon-shim',
    setup(build) {
      build.onResolve({ filter: /^node-gyp-build$/ }, (args) => {
        if (args.importer.includes(netlink)) return { path: shim };
        return {
          errors: [
            {
              text:
                `${args.importer} loads a native addon through node-gyp-build: ` +
                'teach tools/build/lib/addons.mjs and runtime/node-gyp-build.ts about it',
            },
          ],
        };
      });
    },
  };
}

/**
 * Sends the netlink package's `require("util")` to a module exporting only what the
 * package uses (runtime/netlink-util.ts says why: its __importStar of the whole of
 * node:util costs start-up time).
 */
function netlinkUtilShim(root) {
  const shim = path.join(root, 'tools', 'build', 'runtime', 'netlink-util.ts');
  const netlink = `${path.sep}node_modules${path.sep}netlink${path.sep}`;
  return {
    name: 'cnikit-netlink-util',
    setup(build) {
      build.onResolve({ filter: /^util$/ }, (args) => {
        if (!args.importer.includes(netlink)) return undefined;
        // A newer netlink using more of util must fail the build, not the plugin at run time.
        const used = new Set(
          [...fs.readFileSync(args.importer, 'utf8').matchAll(/\butil\.(\w+)|\{\s*(\w+)\s*\}\s*=\s*util\b/g)].map((m) => m[1] ?? m[2]),
        );
        const missing = [...used].filter((n) => n !== 'getSystemErrorName');
        if (missing.length)
          return {
            errors: [{ text: `${args.importer} uses util.${missing.join(', util.')}: add it to tools/build/runtime/netlink-util.ts` }],
          };
        return { path: shim };
      });
    },
  };
}

/**
 * Pass 1: what to initialise while the snapshot is built. That is every module the
 * programs' entries import, and, with `lazy`, also what workspace code require()s
 * inside functions (netlib defers `netlink` that way so a VERSION call never loads
 * it): in a snapshot such a deferral costs nothing, its module is already initialised.
 * The entries themselves never run at build time.
 */
async function warmList(root, programs, lazy) {
  const res = await esbuild.build({ ...baseOptions(root, false), entryPoints: programs.map((p) => p.entry), outdir: 'out' });
  const inputs = res.metafile.inputs;
  const entries = new Set(programs.map((p) => path.relative(root, p.entry)));
  const warm = new Set();
  for (const e of entries) {
    if (!inputs[e]) throw new Error(`esbuild did not see entry ${e}`);
    // An import() stays a deferral: warming it would pull a lazy module (lib/lazy.mjs) into the bundle.
    for (const i of inputs[e].imports) if (!i.external && i.kind !== 'dynamic-import') warm.add(i.path);
  }
  if (lazy) {
    for (const [file, input] of Object.entries(inputs)) {
      if (file.includes('node_modules/')) continue; // packages' own lazy requires are theirs to decide
      for (const i of input.imports) if (!i.external && i.kind === 'require-call' && !entries.has(i.path)) warm.add(i.path);
    }
  }
  return [...warm].sort().map((p) => path.resolve(root, p));
}

/**
 * The generated entry: a call of launch() with the program table. `start(p)` is the JS
 * expression that runs program p (by default, require() of its entry module).
 */
export function launcherSource(root, programs, warm, { multicall, snapshot, start }) {
  const req = (file) => `() => require(${JSON.stringify(file)})`;
  const launcher = path.join(root, 'tools', 'build', 'runtime', 'launcher.ts');
  return `require(${JSON.stringify(launcher)}).launch({
  multicall: ${multicall},
  snapshot: ${snapshot},
  programs: {${programs.map((p) => `\n    ${JSON.stringify(p.name)}: ${start ? `() => ${start(p)}` : req(p.entry)},`).join('')}
  },
  warm: [${warm.map((w) => `\n    ${req(w)},`).join('')}
  ],
});\n`;
}

/** Bundles a generated entry; `plugins` add to the shims (lib/lazy.mjs's). */
export async function bundleSource(root, minify, contents, plugins = []) {
  const res = await esbuild.build({
    ...baseOptions(root, minify, plugins),
    stdin: { contents, resolveDir: root, sourcefile: 'cnikit-launch.js', loader: 'js' },
    outfile: 'bundle.js',
  });
  const warnings = await esbuild.formatMessages(res.warnings, { kind: 'warning', color: false });
  return { code: res.outputFiles[0].text, inputs: Object.keys(res.metafile.inputs), warnings };
}

/**
 * Pass 2: the executable's bundle.
 * @returns {Promise<{ code: string, inputs: string[], warnings: string[] }>}
 *   inputs are paths relative to root (addon detection, change detection).
 */
export async function bundle(root, programs, { multicall, minify, snapshot, warmLazy, plugins }) {
  // Without a snapshot nothing is warmed: each call loads only what its program uses.
  // A multi-call snapshot is one module graph: warming it needs every program's modules.
  const warm = snapshot ? await warmList(root, programs, warmLazy) : [];
  return bundleSource(root, minify, launcherSource(root, programs, warm, { multicall, snapshot }), plugins);
}
