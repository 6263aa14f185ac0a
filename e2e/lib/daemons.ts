/**
 * Built daemons (dist/bin) run as child processes by an e2e file: each writes its stdout and stderr
 * to a log file of its own in `logDir`, and stopAll() in afterAll leaves none running.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { pluginPath } from './paths';

export class Daemons {
  private readonly running = new Set<ChildProcess>();

  constructor(private readonly logDir: string) {}

  /** Starts dist/bin/<bin> with `args`, output appended to <logDir>/<log>. */
  start(bin: string, args: string[], log: string): ChildProcess {
    const out = fs.openSync(path.join(this.logDir, log), 'a');
    const child = spawn(pluginPath(bin), args, { stdio: ['ignore', out, out] });
    fs.closeSync(out); // the child holds its own copy
    this.running.add(child);
    child.on('exit', () => this.running.delete(child));
    return child;
  }

  stop(child: ChildProcess): Promise<void> {
    return stopProcess(child);
  }

  async stopAll(): Promise<void> {
    for (const child of [...this.running]) await this.stop(child);
  }
}

/** SIGTERM, SIGKILL after 10 s; resolves once the process has exited (at once when it already has). */
export async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(t);
}
