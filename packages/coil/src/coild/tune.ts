/**
 * Imported first by coild's main: re-executes the process (same pid, execve) once with a smaller V8 young
 * generation (--max-semi-space-size=1, MiB), which V8 only takes at start-up, and with one malloc arena
 * (MALLOC_ARENA_MAX=1, which glibc reads only at start-up). A daemon that lives for days trades a few more
 * scavenges and a shared malloc lock among Node's few threads for less resident memory: under 100 ADDs at
 * once, peak RSS 82.2-82.3 -> 78.5-80.0 MiB, 100 ADDs 2.5-2.6 -> 2.6-2.8 s (docs/build.md).
 * COILD_NO_TUNE=1 skips it; NODE_OPTIONS and MALLOC_ARENA_MAX given by the user are kept.
 */
const FLAG = '--max-semi-space-size=1';

function tune(): void {
  const env = process.env;
  if (env.COILD_NO_TUNE === '1' || (env.NODE_OPTIONS ?? '').includes('--max-semi-space-size')) return;
  const execve = (process as unknown as { execve?: (file: string, args: string[], env: NodeJS.ProcessEnv) => never }).execve;
  if (typeof execve !== 'function') return;
  let sea = false;
  try {
    sea = (require('node:sea') as { isSea(): boolean }).isSea();
  } catch {
    // not a single executable
  }
  // As a SEA, only when started by its own name: `cnikit coild ...` (multi-call) had its sub-command
  // consumed by the launcher already, and argv0 must stay what the launcher dispatches on.
  const base = (p: string): string => p.slice(p.lastIndexOf('/') + 1);
  if (sea && base(process.argv0) !== 'coild' && base(process.execPath) !== 'coild') return;
  const args = sea ? process.argv.slice(2) : process.argv.slice(1);
  process.removeAllListeners('warning'); // execve is experimental in Node 24: no notice on stderr
  const tuned = { ...env, MALLOC_ARENA_MAX: env.MALLOC_ARENA_MAX ?? '1', NODE_OPTIONS: `${env.NODE_OPTIONS ?? ''} ${FLAG}`.trim() };
  execve.call(process, process.execPath, [process.argv0, ...args], tuned);
}

tune();
