/**
 * @cnikit/kube/lite: the one API-server client for per-pod binaries (gcp-ipam's IPAM plugin, and the provisioner,
 * a one-shot Job that shares the plugin's IPPool code). It takes the kit's credentials (kubeconfig.ts) and speaks
 * JSON over node:https with one keep-alive agent, and throws the kit's ApiError, so callers test failures with the
 * kit's predicates. It exists because the kit's entry point (informers, controllers, metrics)
 * costs milliseconds to load on every CNI call; daemons and controllers use the kit (@cnikit/kube).
 */
import * as http from 'node:http';
import * as https from 'node:https';
import { retry, type Backoff } from '@cnikit/netlib/retry';
import { ApiError, type ApiStatus } from './errors';
import { credentialsFromFiles, inClusterCredentials, type KubeCredentials } from './kubeconfig';

export { inClusterServer } from './kubeconfig';

export { ApiError, isAlreadyExists, isConflict, isNotFound } from './errors';

/** 429 ("storage is (re)initializing" just after a CRD appears) and 503: 100 ms doubling, 6 attempts in all. */
const BUSY_SERVER: Backoff = { steps: 6, initialMs: 100, factor: 2, jitter: 0, capMs: 3200 };
const isBusyServer = (err: unknown): boolean => err instanceof ApiError && (err.status === 429 || err.status === 503);

export interface KubeLite {
  readonly server: string;
  request<T>(method: string, urlPath: string, body?: unknown, contentType?: string): Promise<T>;
  close(): void;
}

/** Reads a kubeconfig file (the kit's reader: certificates, tokens, exec plugins); errors name the file and the missing part. */
export function kubeFromFile(file: string, opts: { timeoutMs?: number } = {}): KubeLite {
  return new Client(credentialsFromFiles([file]), opts.timeoutMs ?? 15_000);
}

/** In-cluster: the service account's token and CA (the installer and provisioner run as pods). */
export function kubeInCluster(): KubeLite {
  return new Client(inClusterCredentials(), 15_000);
}

class Client implements KubeLite {
  private agent: http.Agent | undefined;
  private readonly url: URL;
  readonly server: string;
  constructor(
    private readonly creds: KubeCredentials,
    private readonly timeoutMs: number,
  ) {
    this.server = creds.server;
    this.url = new URL(creds.server);
  }

  request<T>(method: string, urlPath: string, body?: unknown, contentType = 'application/json'): Promise<T> {
    return retry({ backoff: BUSY_SERVER, retriable: isBusyServer }, () => this.once<T>(method, urlPath, body, contentType));
  }

  /** One keep-alive agent, made with the TLS material of the first request. */
  private agentFor(opts: https.RequestOptions): http.Agent {
    if (this.agent) return this.agent;
    const { ca, cert, key, rejectUnauthorized, servername } = opts;
    this.agent =
      this.url.protocol === 'https:'
        ? new https.Agent({
            keepAlive: true,
            ca,
            cert,
            key,
            ...(rejectUnauthorized === false ? { rejectUnauthorized } : {}),
            ...(servername ? { servername } : {}),
          })
        : new http.Agent({ keepAlive: true });
    return this.agent;
  }

  private async once<T>(method: string, urlPath: string, body: unknown, contentType: string): Promise<T> {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const headers: Record<string, string> = { Accept: 'application/json', 'User-Agent': 'gcp-ipam' };
    if (data !== undefined) {
      headers['Content-Type'] = contentType;
      headers['Content-Length'] = String(Buffer.byteLength(data));
    }
    const opts: https.RequestOptions = { method, headers, timeout: this.timeoutMs };
    await this.creds.applyToHTTPSOptions(opts);
    opts.agent = this.agentFor(opts);
    const mod = this.url.protocol === 'https:' ? https : http;
    return new Promise<T>((resolve, reject) => {
      const req = mod.request(new URL(urlPath, this.url), opts, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          let parsed: unknown;
          try {
            parsed = text ? JSON.parse(text) : undefined;
          } catch {
            parsed = undefined;
          }
          const st = parsed as ApiStatus | undefined;
          if (status >= 400) reject(new ApiError(method, urlPath, status, st?.kind === 'Status' ? st : text));
          else resolve(parsed as T);
        });
      });
      req.on('timeout', () => req.destroy(new Error(`kube: ${method} ${urlPath}: timeout after ${this.timeoutMs} ms`)));
      req.on('error', reject);
      req.end(data);
    });
  }

  close(): void {
    this.agent?.destroy();
  }
}
