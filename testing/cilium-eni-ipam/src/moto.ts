/**
 * moto_server (the EC2 emulator from PyPI `moto[server]`, installed by tools/moto/setup.sh outside the
 * repository) started on a free port (of loopback, or of `host`: a node lab's nodes reach it on the host leg)
 * for one test file or benchmark, and stopped after.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as net from 'node:net';
import * as path from 'node:path';

export interface Moto {
  endpoint: string;
  port: number;
  /** Wipes every resource (moto's reset API). */
  reset(): Promise<void>;
  stop(): Promise<void>;
}

const ROOT = path.resolve(__dirname, '../../..');

/** Path of moto_server, installing it first if needed (idempotent; cached under ~/.cache/cnikit/moto). */
export function motoServerPath(): string {
  if (process.env.CNIKIT_MOTO_SERVER) return process.env.CNIKIT_MOTO_SERVER;
  const r = spawnSync('bash', [path.join(ROOT, 'tools/moto/setup.sh')], { encoding: 'utf8', timeout: 600_000 });
  if (r.status !== 0) throw new Error(`tools/moto/setup.sh failed (${r.status}): ${r.stderr.trim().slice(-2000)}`);
  return r.stdout.trim().split('\n').pop()!;
}

export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, host, () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/**
 * moto draws private IPs at random from the subnet without checking that they are free; the server's
 * random generator is seeded (moto-api/seed) so that a test file sees the same addresses on every run.
 */
export async function startMoto(opts: { timeoutMs?: number; seed?: number; host?: string } = {}): Promise<Moto> {
  const bin = motoServerPath();
  const host = opts.host ?? '127.0.0.1';
  const port = await freePort(host);
  const child: ChildProcess = spawn(bin, ['-H', host, '-p', String(port)], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, AWS_DEFAULT_REGION: 'us-east-1', MOTO_ALLOW_NONEXISTENT_REGION: 'true' },
  });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const endpoint = `http://${host}:${port}`;
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  for (;;) {
    if (child.exitCode !== null) throw new Error(`moto_server exited ${child.exitCode}: ${stderr}`);
    try {
      const r = await fetch(`${endpoint}/moto-api/`, { signal: AbortSignal.timeout(1000) });
      if (r.ok || r.status < 500) break;
    } catch {
      /* not up yet */
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`moto_server did not answer on ${endpoint}: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  await fetch(`${endpoint}/moto-api/seed?a=${opts.seed ?? 42}`, { method: 'POST' });
  return {
    endpoint,
    port,
    async reset() {
      await fetch(`${endpoint}/moto-api/reset`, { method: 'POST' });
    },
    stop() {
      return new Promise<void>((resolve) => {
        if (child.exitCode !== null) {
          resolve();
          return;
        }
        const t = setTimeout(() => child.kill('SIGKILL'), 3000);
        child.once('exit', () => {
          clearTimeout(t);
          resolve();
        });
        child.kill('SIGTERM');
      });
    },
  };
}
