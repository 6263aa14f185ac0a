/**
 * Running a program inside a network namespace without `ip netns exec`.
 *
 * The child is forked while the calling thread is inside the namespace (Node's spawn
 * forks from the calling thread, synchronously), so it starts there; its output is
 * then collected asynchronously from the host namespace. Used by tests and by code
 * that must drive iptables/nft inside a container.
 */
import { runInNetns, type Netns } from './handle';

export interface ExecResult {
  stdout: string;
  stderr: string;
  /** Exit status; null when the child was killed by a signal. */
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ExecOptions {
  /** Written to the child's stdin, which is then closed. */
  input?: string | Buffer;
  env?: NodeJS.ProcessEnv;
  /** Kills the child (SIGKILL) after this many milliseconds. */
  timeoutMs?: number;
}

/**
 * Runs `cmd args...` inside `ns` and resolves with its output and exit status (a
 * non-zero status is not an error). Rejects when the program cannot be started.
 */
export function execInNetns(ns: Netns, cmd: string, args: readonly string[] = [], opts: ExecOptions = {}): Promise<ExecResult> {
  // Required here, not at the top: most plugin calls never exec, and node:child_process costs ms to load.
  const { spawn } = require('node:child_process') as typeof import('node:child_process');
  return new Promise<ExecResult>((resolve, reject) => {
    const child = runInNetns(ns, () =>
      spawn(cmd, args, {
        stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
        env: opts.env ?? process.env,
        ...(opts.timeoutMs ? { timeout: opts.timeoutMs, killSignal: 'SIGKILL' as const } : {}),
      }),
    );
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout!.on('data', (b: Buffer) => out.push(b));
    child.stderr!.on('data', (b: Buffer) => err.push(b));
    child.on('error', reject);
    child.on('close', (code, signal) =>
      resolve({ stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString(), code, signal }),
    );
    if (opts.input !== undefined) child.stdin!.end(opts.input);
  });
}
