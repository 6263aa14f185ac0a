/**
 * The entry of the build's trainer executable (tools/build/lib/train.mjs): a SEA made from
 * the same pinned Node as every executable, holding the same native addons, that runs one
 * program's bundled source from a file and, when the process exits, writes V8's code cache
 * for that source. That cache then holds the bytecode of every function the call ran; fed
 * back in as a later call's input, it accumulates over calls. The build trains one per CNI
 * command and embeds them in the real executable (runtime/program-chunk.ts).
 *
 * Why a SEA and not `node`: the program then runs exactly as it will in the executable
 * (node:sea answers isSea(), addons come from assets), and V8 accepts a cache only from a
 * runtime with the same version and flags, which the pinned Node guarantees either way.
 *
 *   CNIKIT_TRAIN_NAME    program name (the script's file name is <name>.js, as in the executable)
 *   CNIKIT_TRAIN_SOURCE  the program's wrapped bundle (ASCII)
 *   CNIKIT_TRAIN_CACHE   code cache file: read if present, (re)written at exit
 */
import { readFileSync, writeFileSync } from 'node:fs';
import type * as Vm from 'node:vm';
import { runProgram } from './program-chunk';

const name = need('CNIKIT_TRAIN_NAME');
const cacheFile = need('CNIKIT_TRAIN_CACHE');
const source = readFileSync(need('CNIKIT_TRAIN_SOURCE'), 'latin1');
let cachedData: Buffer | undefined;
try {
  cachedData = readFileSync(cacheFile);
} catch {
  cachedData = undefined; // first call of a training: compile from source
}
// The program must not see our variables (a plugin may pass its environment on to delegates).
for (const k of ['CNIKIT_TRAIN_NAME', 'CNIKIT_TRAIN_SOURCE', 'CNIKIT_TRAIN_CACHE']) delete process.env[k];

let script: Vm.Script | undefined;
process.on('exit', () => {
  if (script === undefined) return;
  if (cachedData !== undefined && script.cachedDataRejected) {
    process.stderr.write(`trainer: code cache of ${name} rejected: starting over\n`);
  }
  writeFileSync(cacheFile, script.createCachedData());
});
// A CNI plugin's work ends after its top level returns (process.exit from its promise
// chain): the exit handler above then sees every function the call compiled.
runProgram(name, source, cachedData, (s) => {
  script = s;
});

function need(key: string): string {
  const v = process.env[key];
  if (!v) {
    process.stderr.write(`trainer: ${key} not set\n`);
    process.exit(2);
  }
  return v;
}
