/**
 * The HTTP endpoint every daemon and controller exposes: /metrics (Prometheus text from a Registry of
 * prom.ts), /healthz and /livez (liveness), /readyz (readiness). Checks are named functions; a check passes
 * when it returns true/undefined and fails when it returns false or throws. Like the API server's own
 * endpoints, `?verbose` lists every check, and /readyz/<name> runs one. Binds 127.0.0.1 unless told otherwise.
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from './prom';
import type { Informer } from './informer';
import type { LeaderElector } from './leader';
import type { KubeObject } from './resource';

export type Check = () => boolean | void | Promise<boolean | void>;

export interface ServerOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0 (any free port; read .port after listen). */
  port?: number;
  /** Served at /metrics when given. */
  registry?: Registry;
  /** Per-check timeout (ms). Default 5000. */
  checkTimeoutMs?: number;
}

export class HealthServer {
  private readonly health = new Map<string, Check>();
  private readonly ready = new Map<string, Check>();
  private server: http.Server | undefined;
  private shuttingDown = false;

  constructor(private readonly opts: ServerOptions = {}) {}

  /** Liveness check (failing it should get the process restarted). */
  addHealthCheck(name: string, check: Check): this {
    this.health.set(name, check);
    return this;
  }

  /** Readiness check (failing it takes the process out of service, e.g. caches not synced yet). */
  addReadyCheck(name: string, check: Check): this {
    this.ready.set(name, check);
    return this;
  }

  get port(): number {
    return (this.server?.address() as AddressInfo | null)?.port ?? 0;
  }

  get url(): string {
    return `http://${this.opts.host ?? '127.0.0.1'}:${this.port}`;
  }

  async listen(): Promise<this> {
    const server = http.createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        if (!res.headersSent) res.writeHead(500, { 'Content-Type': 'text/plain' });
        res.end(`internal error: ${(err as Error).message}\n`);
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.opts.port ?? 0, this.opts.host ?? '127.0.0.1', () => resolve());
    });
    this.server = server;
    return this;
  }

  /** /readyz fails from now on (draining), then the server closes. */
  async close(): Promise<void> {
    this.shuttingDown = true;
    const s = this.server;
    this.server = undefined;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://x');
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { Allow: 'GET, HEAD' }).end();
      return;
    }
    if (url.pathname === '/metrics' && this.opts.registry) {
      const body = await this.opts.registry.metrics();
      res.writeHead(200, { 'Content-Type': this.opts.registry.contentType }).end(req.method === 'HEAD' ? undefined : body);
      return;
    }
    const m = /^\/(healthz|livez|readyz)(?:\/([^/]+))?$/.exec(url.pathname);
    if (!m) {
      res.writeHead(404, { 'Content-Type': 'text/plain' }).end('not found\n');
      return;
    }
    const checks = m[1] === 'readyz' ? this.ready : this.health;
    let selected = [...checks];
    if (m[2]) {
      const one = checks.get(m[2]);
      if (!one) {
        res.writeHead(404, { 'Content-Type': 'text/plain' }).end(`no check ${m[2]}\n`);
        return;
      }
      selected = [[m[2], one]];
    }
    const results = await Promise.all(selected.map(async ([name, check]) => [name, await this.run(check)] as const));
    if (m[1] === 'readyz' && !m[2]) results.unshift(['shutdown', this.shuttingDown ? 'shutting down' : undefined] as const);
    const failed = results.filter(([, err]) => err !== undefined);
    const ok = failed.length === 0;
    const verbose = url.searchParams.has('verbose') || !ok;
    const lines = verbose ? results.map(([name, err]) => (err === undefined ? `[+]${name} ok` : `[-]${name} failed: ${err}`)) : [];
    lines.push(ok ? `${m[1]} check passed` : `${m[1]} check failed`);
    res.writeHead(ok ? 200 : 503, { 'Content-Type': 'text/plain; charset=utf-8', 'Cache-Control': 'no-store' });
    res.end(verbose ? `${lines.join('\n')}\n` : 'ok');
  }

  /** undefined when the check passes, else the reason. */
  private async run(check: Check): Promise<string | undefined> {
    const timeoutMs = this.opts.checkTimeoutMs ?? 5000;
    let timer: NodeJS.Timeout | undefined;
    try {
      const r = await Promise.race([
        Promise.resolve().then(check),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs);
        }),
      ]);
      return r === false ? 'check returned false' : undefined;
    } catch (err) {
      return (err as Error).message ?? String(err);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** Ready once every informer has listed (caches synced). */
export function informersSynced(...informers: Informer<KubeObject>[]): Check {
  return () => informers.every((i) => i.hasSynced());
}

/** Healthy unless this process believes it leads but has stopped renewing (client-go's HealthzAdaptor). */
export function leaderElectionHealthy(elector: LeaderElector, toleranceMs = 20_000): Check {
  return () => elector.healthy(toleranceMs);
}

/** Where a server listens; "" host = every address. */
export interface ListenAddr {
  host: string;
  port: number;
}

/**
 * A listen flag's value: ":9384", "127.0.0.1:9384", "[::1]:9384". `flag` names it in the error
 * (`--metrics-addr: expected [host]:port with a port 0-65535, got "9384"`).
 */
export function parseListenAddr(value: string, flag = 'listen address'): ListenAddr {
  const i = value.lastIndexOf(':');
  const port = value.slice(i + 1);
  if (i < 0 || !/^\d{1,5}$/.test(port) || Number(port) > 65535) {
    throw new TypeError(`${flag}: expected [host]:port with a port 0-65535, got ${JSON.stringify(value)}`);
  }
  return { host: value.slice(0, i).replace(/^\[(.*)\]$/, '$1'), port: Number(port) };
}
