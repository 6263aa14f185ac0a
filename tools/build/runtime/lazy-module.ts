/**
 * Loads a lazy module (tools/build/lib/lazy.mjs) from the executable's assets when a program
 * import()s it: `<name>.js`, the module bundled on its own and wrapped in a function, and
 * `<name>.cache`, V8's code cache of its top level made by the same Node at build time. Each
 * module is compiled once per process; a second import() gets the same exports.
 */
import type * as Sea from 'node:sea';
import { runProgram } from './program-chunk';

const loaded = new Map<string, unknown>();

export function loadLazyModule(name: string): unknown {
  if (loaded.has(name)) return loaded.get(name);
  const sea: typeof Sea = require('node:sea');
  let source: string;
  try {
    source = Buffer.from(sea.getRawAsset(`${name}.js`)).toString('latin1');
  } catch (err) {
    throw new Error(`${name}: not in this executable (${(err as Error).message}); it was built without its lazy modules`, {
      cause: err,
    });
  }
  const exports = runProgram(name, source, Buffer.from(sea.getRawAsset(`${name}.cache`)));
  loaded.set(name, exports);
  return exports;
}
