/**
 * Child processes for the end-to-end harness: every helper of e2e/lib goes through `run`, which
 * never throws on a non-zero exit (the result carries code, stdout and stderr) unless asked to,
 * and kills the child when a timeout expires.
 */
import { spawn } from 'node:child_process';

export interface ExecResult {
  /** exit code; -1 when killed by a signal or the timeout */
  code: number;
  stdout: string;
  stderr: string;
  /** the command line, for messages */
  cmd: string;
  durationMs: number;
}

export interface RunOptions {
  /** written to stdin, then stdin is closed (stdin is always closed: no test waits for a tty) */
  input?: string | Buffer;
  /** replaces the environment when `cleanEnv`, else is merged over process.env */
  env?: Record<string, string | undefined>;
  cleanEnv?: boolean;
  cwd?: string;
  /** milliseconds; default 60 s */
  timeoutMs?: number;
  /** throw a descriptive error when the exit code is not 0 */
  check?: boolean;
}

export class ExecError extends Error {
  constructor(readonly result: ExecResult) {
    super(`command failed (exit ${result.code}): ${result.cmd}\n--- stdout\n${result.stdout}--- stderr\n${result.stderr}`);
    this.name = 'ExecError';
  }
}

const quote = (a: string): string => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`);
export const shellLine = (argv: readonly string[]): string => argv.map(quote).join(' ');

export function run(argv: readonly string[], opts: RunOptions = {}): Promise<ExecResult> {
  const [file, ...args] = argv;
  if (!file) throw new Error('run: empty command');
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(opts.cleanEnv ? (opts.env ?? {}) : { ...process.env, ...opts.env })) {
    if (v !== undefined) env[k] = v;
  }
  const cmd = shellLine(argv);
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env, cwd: opts.cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    const timer = setTimeout(() => {
      err.push(Buffer.from(`\n[harness] killed after ${opts.timeoutMs ?? 60_000} ms\n`));
      child.kill('SIGKILL');
    }, opts.timeoutMs ?? 60_000);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`cannot start ${cmd}: ${e.message}`));
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      const result: ExecResult = {
        code: code ?? -1,
        stdout: Buffer.concat(out).toString(),
        stderr: Buffer.concat(err).toString(),
        cmd,
        durationMs: Date.now() - started,
      };
      if (opts.check && result.code !== 0) reject(new ExecError(result));
      else resolve(result);
    });
    child.stdin.on('error', () => undefined); // the child may exit before reading its input
    child.stdin.end(opts.input ?? '');
  });
}

/** Runs and returns stdout; throws ExecError on a non-zero exit. */
export async function runOk(argv: readonly string[], opts: RunOptions = {}): Promise<string> {
  return (await run(argv, { ...opts, check: true })).stdout;
}

// the repository's one sleep (docs/conventions.md)
export { sleep } from '@cnikit/netlib/retry';
