/**
 * Runs one program of the multi-call executable from its SEA assets (written by
 * tools/build/lib/chunks.mjs): `program/<name>.js`, the program bundled on its own and
 * wrapped in a function, and `program/<name>.cache`, V8's code cache for that source made
 * by the same Node at build time. Only the called program's source is read and compiled,
 * so a start costs the same whatever the number of programs the executable holds.
 */
import type * as Sea from 'node:sea';
import type * as Vm from 'node:vm';

type ProgramFn = (req: NodeJS.Require, module: { exports: unknown }, exports: unknown, filename: string, dirname: string) => void;

export function runProgramChunk(name: string): void {
  const sea: typeof Sea = require('node:sea');
  const vm: typeof Vm = require('node:vm');
  const filename = `${name}.js`;
  const source = sea.getAsset(`program/${filename}`, 'utf8');
  const cachedData = Buffer.from(sea.getRawAsset(`program/${name}.cache`));
  const script = new vm.Script(source, { filename, cachedData });
  if (script.cachedDataRejected && process.env.CNIKIT_STARTUP_REPORT) {
    process.stderr.write(`startup: code cache of ${name} rejected (built by another Node?)\n`);
  }
  const run = script.runInThisContext() as ProgramFn;
  const mod = { exports: {} };
  // The SEA's require loads built-in modules only, which is all a bundle asks for.
  run(require, mod, mod.exports, filename, '.');
}
