/**
 * The entry of every executable built by tools/build/sea.mjs (the build generates a
 * few lines calling launch() with the table of programs).
 *
 * Code-cache mode (the default, measured faster: docs/build.md): the program starts at
 * once; each program's entry module is required only when that program runs, so a
 * multi-call executable initialises only the program it was called as.
 *
 * Snapshot mode (--startup snapshot): while `node --experimental-sea-config` builds the
 * V8 startup snapshot, launch() runs `warm` (it requires the modules the programs import,
 * so their initialised JavaScript lands in the snapshot) and registers the program start
 * as the deserialize-main function. The entry module itself is required only at call
 * time, so its top level (the CNI dispatch) sees the caller's env, argv and stdin.
 */
import { basename } from 'node:path';
import type * as V8 from 'node:v8';

export interface LaunchSpec {
  /** Program name -> require() of its entry module, whose top level runs the program. */
  programs: Record<string, () => unknown>;
  /** require()s of what the entries import; run only while building a snapshot. */
  warm: Array<() => unknown>;
  /** True for the multi-call executable, which picks a program by its own name. */
  multicall: boolean;
  /** Built with useSnapshot; otherwise node:v8 is not even loaded (start-up time). */
  snapshot: boolean;
}

const NODE_OWN = /^(NODE_.*|FORCE_COLOR|NO_COLOR|NODE|TERM|COLORTERM)$/;

export function launch(spec: LaunchSpec): void {
  const v8: typeof V8 | undefined = spec.snapshot ? require('node:v8') : undefined;
  if (!v8?.startupSnapshot.isBuildingSnapshot()) {
    start(spec);
    return;
  }
  // Node's own switches (colours, NODE_*) are its business; ours must not be read this early.
  const envReads = watchEnvReads(() => spec.warm.forEach((w) => w())).filter((k) => !NODE_OWN.test(k));
  if (envReads.length > 0) {
    // Not fatal (Node itself may peek at NODE_* variables), but a plugin module that
    // reads CNI_* at import would see the build machine's value forever.
    process.stderr.write(`[sea] warning: process.env read while building the snapshot (value frozen): ${envReads.join(', ')}\n`);
  }
  v8.startupSnapshot.setDeserializeMainFunction(() => start(spec));
}

function start(spec: LaunchSpec): void {
  if (process.env.CNIKIT_STARTUP_REPORT) reportBuiltinsAtExit();
  const names = Object.keys(spec.programs);
  if (spec.multicall && process.argv[2] === '--list' && !names.includes(basename(process.argv0))) {
    process.stdout.write(names.join('\n') + '\n'); // install-plugins links these names
    return;
  }
  const name = spec.multicall ? pickByName(spec.programs) : names[0];
  if (name === undefined) {
    process.stderr.write("usage: cnikit <program> [args], or cnikit linked under the program's name\n" + `programs: ${names.join(' ')}\n`);
    process.exitCode = 2;
    return;
  }
  spec.programs[name]!();
}

/**
 * Which program a multi-call invocation means: the name it was started by (argv0, as
 * libcni execs a plugin by its path on CNI_PATH), else the executable's own file name
 * (a hard link keeps its name in /proc/self/exe), else `cnikit <program> ...`.
 */
function pickByName(programs: Record<string, () => unknown>): string | undefined {
  const has = (n: string | undefined): n is string => n !== undefined && Object.hasOwn(programs, n);
  for (const n of [basename(process.argv0), basename(process.execPath)]) {
    if (has(n)) return n;
  }
  // In a SEA, user arguments start at argv[2] (argv[1] repeats the executable).
  const sub = process.argv[2];
  if (!has(sub)) return undefined;
  process.argv.splice(2, 1); // the program sees the same argv as when called by its own name
  return sub;
}

/**
 * CNIKIT_STARTUP_REPORT=1: prints on stderr, at exit, the public Node modules the program
 * loaded (`startup: loaded node:child_process node:net ...`). Each costs start-up time that a
 * require() inside the function using it would save on calls that never need it (VERSION).
 * tools/bench/startup.mjs shows it for every executable.
 */
function reportBuiltinsAtExit(): void {
  const list = (process as unknown as { moduleLoadList: string[] }).moduleLoadList;
  const before = new Set(list);
  process.on('exit', () => {
    const loaded = list.filter((m) => !before.has(m) && m.startsWith('NativeModule ') && !m.startsWith('NativeModule internal/'));
    process.stderr.write(`startup: loaded ${loaded.map((m) => `node:${m.slice('NativeModule '.length)}`).join(' ') || 'nothing'}\n`);
  });
}

/** Runs fn with process.env replaced by a proxy that records the keys read. */
function watchEnvReads(fn: () => void): string[] {
  const real = process.env;
  const reads = new Set<string>();
  process.env = new Proxy(real, {
    get(target, key) {
      if (typeof key === 'string') reads.add(key);
      return Reflect.get(target, key);
    },
  });
  try {
    fn();
  } finally {
    process.env = real;
  }
  return [...reads].sort();
}
