/**
 * Runs a program of an executable from its SEA assets (written by tools/build/lib/chunks.mjs):
 * `program/<name>.js`, the program bundled on its own and wrapped in a function, and
 * `program/<name>.cache` (and `program/<name>.<COMMAND>.cache`), V8's code cache for that source
 * made by the same Node at build time.
 *
 * Every CNI plugin starts this way, alone or in the multi-call executable. Two reasons:
 * - a multi-call start reads and compiles only the called program, whatever the number of
 *   programs the executable holds;
 * - the cache is ours to make. Node's own SEA code cache (`useCodeCache`) holds only what V8
 *   compiled before the script ran: the top level. Every function a CNI call runs was then
 *   compiled lazily on every call. The build instead runs the program through training calls
 *   (tools/build/lib/train.mjs) and stores the cache V8 produces afterwards, which holds the
 *   bytecode of every function those calls ran (measured: a veth ADD 47 -> 37-41 ms).
 */
import type * as Sea from 'node:sea';
import type * as Vm from 'node:vm';

type ProgramFn = (req: NodeJS.Require, module: { exports: unknown }, exports: unknown, filename: string, dirname: string) => void;

export function runProgramChunk(name: string): void {
  const sea: typeof Sea = require('node:sea');
  // The build makes the source ASCII (lib/chunks.mjs), so latin1 decodes it exactly, as a
  // one-byte string, and far cheaper than sea.getAsset's UTF-8 TextDecoder.
  const source = Buffer.from(sea.getRawAsset(`program/${name}.js`)).toString('latin1');
  runProgram(name, source, Buffer.from(cacheAsset(sea, name)));
}

/**
 * The cache for this call: `program/<name>.<CNI_COMMAND>.cache` when the build trained one for
 * that command, else ADD's (CHECK, GC and STATUS share most of its code), else
 * `program/<name>.cache` (top level, or VERSION's). A cache holds what its training ran, and
 * deserialising it costs time in proportion: a VERSION call with the cache of an ADD paid ~2 ms
 * of CPU (8% of the runtime's own start) for functions it never runs.
 */
function cacheAsset(sea: typeof Sea, name: string): ArrayBuffer {
  const command = process.env.CNI_COMMAND;
  for (const c of command !== undefined && /^[A-Z]+$/.test(command) ? [command, 'ADD'] : ['ADD']) {
    try {
      return sea.getRawAsset(`program/${name}.${c}.cache`);
    } catch {
      // no cache trained for that command
    }
  }
  return sea.getRawAsset(`program/${name}.cache`);
}

/**
 * Compiles `source` with `cachedData` and runs it; returns what it exports (a lazy module's API,
 * runtime/lazy-module.ts). `onCompiled` sees the script before the program runs (the trainer,
 * runtime/trainer.ts, calls its createCachedData() at exit).
 */
export function runProgram(name: string, source: string, cachedData: Buffer | undefined, onCompiled?: (s: Vm.Script) => void): unknown {
  const vm: typeof Vm = require('node:vm');
  const filename = `${name}.js`;
  const script = new vm.Script(source, { filename, cachedData });
  if (cachedData !== undefined && script.cachedDataRejected && process.env.CNIKIT_STARTUP_REPORT) {
    process.stderr.write(`startup: code cache of ${name} rejected (built by another Node?)\n`);
  }
  onCompiled?.(script);
  const run = script.runInThisContext() as ProgramFn;
  const mod = { exports: {} };
  // The SEA's require loads built-in modules only, which is all a bundle asks for.
  run(require, mod, mod.exports, filename, '.');
  return mod.exports;
}
