/**
 * @cnikit/kube/lite: the one API-server client for per-pod binaries (gcp-ipam's IPAM plugin, and the provisioner,
 * a one-shot Job that shares the plugin's IPPool code). It reads a kubeconfig (client certificate, bearer token
 * or token file; CA data or file) with js-yaml and speaks JSON over node:https with one keep-alive agent, and
 * throws the kit's ApiError, so callers test failures with the kit's predicates. It exists because
 * @kubernetes/client-node (behind the kit's connect()) costs tens of milliseconds to load on every CNI call
 * (measured in docs/kube.md); daemons and controllers use the kit (@cnikit/kube).
 */
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import * as path from 'node:path';
import { retry, type Backoff } from '@cnikit/netlib/retry';
import { ApiError, type ApiStatus } from './errors';

export { ApiError, isAlreadyExists, isConflict, isNotFound } from './errors';

/** 429 ("storage is (re)initializing" just after a CRD appears) and 503: 100 ms doubling, 6 attempts in all. */
const BUSY_SERVER: Backoff = { steps: 6, initialMs: 100, factor: 2, jitter: 0, capMs: 3200 };
const isBusyServer = (err: unknown): boolean => err instanceof ApiError && (err.status === 429 || err.status === 503);

export interface KubeLite {
  readonly server: string;
  request<T>(method: string, urlPath: string, body?: unknown, contentType?: string): Promise<T>;
  close(): void;
}

interface KubeconfigFile {
  clusters?: {
    name: string;
    cluster: {
      server: string;
      'certificate-authority'?: string;
      'certificate-authority-data'?: string;
      'insecure-skip-tls-verify'?: boolean;
    };
  }[];
  users?: {
    name: string;
    user: {
      'client-certificate'?: string;
      'client-certificate-data'?: string;
      'client-key'?: string;
      'client-key-data'?: string;
      token?: string;
      tokenFile?: string;
    };
  }[];
  contexts?: { name: string; context: { cluster: string; user: string } }[];
  'current-context'?: string;
}

/** Reads a kubeconfig file; errors name the file and the missing part. */
export function kubeFromFile(file: string, opts: { timeoutMs?: number } = {}): KubeLite {
  const { load } = require('js-yaml') as typeof import('js-yaml');
  const dir = path.dirname(file);
  const kc = load(fs.readFileSync(file, 'utf8')) as KubeconfigFile;
  const ctxName = kc['current-context'];
  const ctx = kc.contexts?.find((c) => c.name === ctxName)?.context ?? kc.contexts?.[0]?.context;
  const cluster = kc.clusters?.find((c) => c.name === ctx?.cluster)?.cluster ?? kc.clusters?.[0]?.cluster;
  const user = kc.users?.find((u) => u.name === ctx?.user)?.user ?? kc.users?.[0]?.user ?? {};
  if (!cluster?.server) throw new Error(`kubeconfig ${file}: no cluster server`);
  const rd = (data: string | undefined, f: string | undefined): Buffer | undefined =>
    data ? Buffer.from(data, 'base64') : f ? fs.readFileSync(path.resolve(dir, f)) : undefined;
  const tls: https.AgentOptions = {
    keepAlive: true,
    ca: rd(cluster['certificate-authority-data'], cluster['certificate-authority']),
    cert: rd(user['client-certificate-data'], user['client-certificate']),
    key: rd(user['client-key-data'], user['client-key']),
    rejectUnauthorized: !cluster['insecure-skip-tls-verify'],
  };
  const token = user.token ?? (user.tokenFile ? fs.readFileSync(user.tokenFile, 'utf8').trim() : undefined);
  return new Client(cluster.server, tls, token, opts.timeoutMs ?? 15_000);
}

/** The API server a pod is given: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, an IPv6 host in brackets. */
export function inClusterServer(env: NodeJS.ProcessEnv = process.env): string {
  const host = env.KUBERNETES_SERVICE_HOST;
  if (!host) throw new Error('kube: not in a cluster (KUBERNETES_SERVICE_HOST unset) and no kubeconfig given');
  return `https://${host.includes(':') ? `[${host}]` : host}:${env.KUBERNETES_SERVICE_PORT ?? '443'}`;
}

/** In-cluster: the service account's token and CA (the installer and provisioner run as pods). */
export function kubeInCluster(): KubeLite {
  const sa = '/var/run/secrets/kubernetes.io/serviceaccount';
  return new Client(
    inClusterServer(),
    { keepAlive: true, ca: fs.readFileSync(`${sa}/ca.crt`) },
    fs.readFileSync(`${sa}/token`, 'utf8').trim(),
    15_000,
  );
}

class Client implements KubeLite {
  private readonly agent: http.Agent;
  private readonly url: URL;
  constructor(
    readonly server: string,
    tls: https.AgentOptions,
    private readonly token: string | undefined,
    private readonly timeoutMs: number,
  ) {
    this.url = new URL(server);
    this.agent = this.url.protocol === 'https:' ? new https.Agent(tls) : new http.Agent({ keepAlive: true });
  }

  request<T>(method: string, urlPath: string, body?: unknown, contentType = 'application/json'): Promise<T> {
    return retry({ backoff: BUSY_SERVER, retriable: isBusyServer }, () => this.once<T>(method, urlPath, body, contentType));
  }

  private once<T>(method: string, urlPath: string, body: unknown, contentType: string): Promise<T> {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const headers: Record<string, string> = { Accept: 'application/json', 'User-Agent': 'gcp-ipam' };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    if (data !== undefined) {
      headers['Content-Type'] = contentType;
      headers['Content-Length'] = String(Buffer.byteLength(data));
    }
    const mod = this.url.protocol === 'https:' ? https : http;
    return new Promise<T>((resolve, reject) => {
      const req = mod.request(new URL(urlPath, this.url), { method, headers, agent: this.agent, timeout: this.timeoutMs }, (res) => {
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
    this.agent.destroy();
  }
}
