import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'esbuild';

/** Bundles a TypeScript program into one CommonJS file that `node <outfile>` runs, as tests run a child program. */
export async function bundleProgram(entry: string, outfile: string): Promise<string> {
  await build({ entryPoints: [entry], bundle: true, platform: 'node', format: 'cjs', target: 'node22', outfile, logLevel: 'error' });
  return outfile;
}

/**
 * Starts a server program and waits for the first line it prints on stdout (its address, once it listens).
 * stop() sends SIGTERM and waits for the exit. Rejects when the program exits before printing a line.
 */
export async function startListening(argv: string[]): Promise<{ line: string; stop: () => Promise<void> }> {
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const line = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('\n')) resolve(out.slice(0, out.indexOf('\n')).trim());
    });
    child.once('exit', (code) => reject(new Error(`${argv.join(' ')}: exited ${code} before printing its address`)));
  });
  return {
    line,
    stop: async () => {
      child.kill('SIGTERM');
      await exited;
    },
  };
}

/**
 * Starts a server program with a fresh temporary directory as its last argument (where it puts its UNIX
 * sockets) and waits for its first line, as startListening; stop() ends it and removes the directory.
 */
export async function serveInTempDir(prefix: string, argv: string[]): Promise<{ dir: string; stop: () => Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  let server: { stop: () => Promise<void> };
  try {
    server = await startListening([...argv, dir]);
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return {
    dir,
    stop: async () => {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
