/**
 * Google Compute Engine through its REST API (plain HTTP, no SDK: the IPAM process starts per CNI call).
 * The endpoint is overridable so tests and benchmarks point it at the emulator in testing/gce-emulator.
 *
 * Calls: instances.get, instances.updateNetworkInterface (fingerprint + requestId), zoneOperations.wait/get,
 * subnetworks.get/patch, and Network Connectivity internalRanges.create (provisioner).
 * Errors: 400 (e.g. missing fingerprint) is final; 412 conditionNotMet (stale fingerprint) re-reads and
 * retries; 403/429 rateLimitExceeded backs off and retries; transport failures and 5xx retry with the same
 * requestId, which the API uses to make the retry idempotent.
 */
import * as http from 'node:http';
import * as https from 'node:https';
import { randomUUID } from 'node:crypto';
import { retry, sleep, type Backoff } from '@cnikit/netlib/retry';

export interface AliasIpRange {
  ipCidrRange: string;
  subnetworkRangeName?: string;
}
export interface NetworkInterface {
  name: string;
  network?: string;
  subnetwork?: string;
  networkIP?: string;
  fingerprint?: string;
  aliasIpRanges?: AliasIpRange[];
}
export interface Instance {
  name: string;
  zone?: string;
  selfLink?: string;
  networkInterfaces: NetworkInterface[];
}
export interface Operation {
  kind?: string;
  name: string;
  status: 'PENDING' | 'RUNNING' | 'DONE';
  operationType?: string;
  targetLink?: string;
  selfLink?: string;
  error?: { errors: { code: string; message: string }[] };
  httpErrorStatusCode?: number;
}

export class GceError extends Error {
  readonly status: number;
  readonly reason: string;
  constructor(what: string, status: number, reason: string, message: string, options?: { cause?: unknown }) {
    super(`gce: ${what}: ${status ? `${status} ` : ''}${reason}: ${message}`, options);
    this.name = 'GceError';
    this.status = status;
    this.reason = reason;
  }
  get rateLimited(): boolean {
    return this.status === 429 || (this.status === 403 && /rateLimitExceeded|userRateLimitExceeded|quotaExceeded/.test(this.reason));
  }
  get stale(): boolean {
    return this.status === 412;
  }
  /** Worth retrying unchanged (same requestId). */
  get transient(): boolean {
    return this.status === 0 || this.status >= 500;
  }
  /** Another operation runs on the resource (400 resourceNotReady): retry after a pause. */
  get busy(): boolean {
    return this.status === 400 && this.reason === 'resourceNotReady';
  }
}

/** A long-running operation finished with an error. */
export class GceOperationError extends GceError {
  constructor(op: Operation) {
    const e = op.error?.errors?.[0];
    super(
      `operation ${op.name} (${op.operationType ?? '?'})`,
      op.httpErrorStatusCode ?? 0,
      e?.code ?? 'OPERATION_FAILED',
      e?.message ?? 'failed',
    );
    this.name = 'GceOperationError';
  }
}

export interface GceOptions {
  /** Compute API base, default https://compute.googleapis.com/compute/v1. */
  endpoint?: string;
  /** Network Connectivity API base, default https://networkconnectivity.googleapis.com/v1. */
  networkConnectivityEndpoint?: string;
  project: string;
  /** Access token source: a fixed token, a function, or undefined (no Authorization header: fakes). */
  token?: string | (() => Promise<string>);
  timeoutMs?: number;
  /** Retries for rate limits / transient failures / stale fingerprints. Default 8. */
  maxAttempts?: number;
  /** First backoff after a rate limit, doubled each time (capped at 5 s). Default 500 ms. */
  rateLimitBackoffMs?: number;
  /** How long to wait for an operation. Default 120 s. */
  operationTimeoutMs?: number;
  /** Observer of every API request (metrics, benchmark counters). */
  onRequest?: (method: string, path: string, status: number) => void;
}

/** While another operation runs on the resource (400 resourceNotReady): 100-250 ms apart, until the operation timeout. */
const BUSY_WAIT: Backoff = { steps: Infinity, initialMs: 100, factor: 1, jitter: 1.5, capMs: 100 };
/** A stale fingerprint (412): read again and re-apply at once. */
const isStale = (err: unknown): boolean => err instanceof GceError && err.stale;
const isBusy = (err: unknown): boolean => err instanceof GceError && err.busy;
const isRateLimitedOrTransient = (err: unknown): boolean => err instanceof GceError && (err.rateLimited || err.transient);

export class GceClient {
  readonly project: string;
  private readonly endpoint: string;
  private readonly ncEndpoint: string;
  private readonly agentHttp = new http.Agent({ keepAlive: true });
  private readonly agentHttps = new https.Agent({ keepAlive: true });

  constructor(private readonly opts: GceOptions) {
    this.project = opts.project;
    this.endpoint = (opts.endpoint ?? 'https://compute.googleapis.com/compute/v1').replace(/\/$/, '');
    this.ncEndpoint = (opts.networkConnectivityEndpoint ?? 'https://networkconnectivity.googleapis.com/v1').replace(/\/$/, '');
  }

  close(): void {
    this.agentHttp.destroy();
    this.agentHttps.destroy();
  }

  private async call<T>(what: string, method: string, url: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = { Accept: 'application/json' };
    const tok = typeof this.opts.token === 'function' ? await this.opts.token() : this.opts.token;
    if (tok) headers.Authorization = `Bearer ${tok}`;
    const data = body === undefined ? undefined : JSON.stringify(body);
    if (data !== undefined) {
      headers['Content-Type'] = 'application/json';
      headers['Content-Length'] = String(Buffer.byteLength(data));
    }
    const u = new URL(url);
    const tls = u.protocol === 'https:';
    const timeout = this.opts.timeoutMs ?? 30_000;
    return new Promise<T>((resolve, reject) => {
      const req = (tls ? https : http).request(u, { method, headers, agent: tls ? this.agentHttps : this.agentHttp }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', (err) => reject(new GceError(what, 0, 'transport', err.message, { cause: err })));
        res.on('end', () => {
          clearTimeout(timer);
          const status = res.statusCode ?? 0;
          this.opts.onRequest?.(method, u.pathname, status);
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown;
          try {
            parsed = text ? JSON.parse(text) : undefined;
          } catch {
            parsed = undefined;
          }
          if (status >= 400) {
            const e = (parsed as { error?: { message?: string; errors?: { reason?: string }[]; status?: string } } | undefined)?.error;
            reject(new GceError(what, status, e?.errors?.[0]?.reason ?? e?.status ?? 'error', e?.message ?? text.slice(0, 300)));
          } else resolve(parsed as T);
        });
      });
      const timer = setTimeout(() => req.destroy(new Error(`timeout after ${timeout} ms`)), timeout);
      req.on('error', (err) => {
        clearTimeout(timer);
        reject(new GceError(what, 0, 'transport', err.message, { cause: err }));
      });
      req.end(data);
    });
  }

  /**
   * Retries rate limits and transient failures with backoff (doubling from rateLimitBackoffMs, equal jitter,
   * capped at 5 s) and waits out busy resources until the operation timeout; 412 and other 4xx are the caller's.
   */
  private withRetry<T>(fn: () => Promise<T>, retryBusy = true): Promise<T> {
    const first = (this.opts.rateLimitBackoffMs ?? 500) / 2;
    const backoff: Backoff = { steps: this.opts.maxAttempts ?? 8, initialMs: first, factor: 2, jitter: 1, capMs: 2500 };
    const once = retryBusy ? (): Promise<T> => this.whileBusy(fn) : fn;
    return retry({ backoff, retriable: isRateLimitedOrTransient }, once);
  }

  /** Runs fn again while the resource is busy with another operation, until the operation timeout. */
  private whileBusy<T>(fn: () => Promise<T>, until = Date.now() + (this.opts.operationTimeoutMs ?? 120_000)): Promise<T> {
    return retry({ backoff: BUSY_WAIT, retriable: isBusy, until }, fn);
  }

  private zonePath(zone: string): string {
    return `${this.endpoint}/projects/${this.project}/zones/${zone}`;
  }

  getInstance(zone: string, instance: string): Promise<Instance> {
    return this.withRetry(() => this.call<Instance>(`instances.get ${instance}`, 'GET', `${this.zonePath(zone)}/instances/${instance}`));
  }

  /**
   * One updateNetworkInterface call. Same requestId on transient retries; 412 (stale fingerprint) and 400
   * resourceNotReady (another operation runs) go back to the caller, who must re-read before writing again.
   */
  updateNetworkInterface(zone: string, instance: string, nic: NetworkInterface, requestId: string = randomUUID()): Promise<Operation> {
    const url = `${this.zonePath(zone)}/instances/${instance}/updateNetworkInterface?networkInterface=${encodeURIComponent(nic.name)}&requestId=${requestId}`;
    return this.withRetry(() => this.call<Operation>(`instances.updateNetworkInterface ${instance}`, 'PATCH', url, nic), false);
  }

  /** zoneOperations.wait until DONE (each wait returns after at most ~2 min, or earlier); throws on an op error. */
  async waitZoneOperation(zone: string, op: Operation): Promise<Operation> {
    const deadline = Date.now() + (this.opts.operationTimeoutMs ?? 120_000);
    let cur = op;
    while (cur.status !== 'DONE') {
      if (Date.now() > deadline)
        throw new GceError(`operation ${op.name}`, 0, 'timeout', `not DONE after ${this.opts.operationTimeoutMs ?? 120_000} ms`);
      cur = await this.withRetry(() =>
        this.call<Operation>(`zoneOperations.wait ${op.name}`, 'POST', `${this.zonePath(zone)}/operations/${op.name}/wait`),
      );
    }
    if (cur.error?.errors?.length) throw new GceOperationError(cur);
    return cur;
  }

  getZoneOperation(zone: string, name: string): Promise<Operation> {
    return this.withRetry(() => this.call<Operation>(`zoneOperations.get ${name}`, 'GET', `${this.zonePath(zone)}/operations/${name}`));
  }

  /**
   * Read-modify-write of one NIC's alias ranges: get (fingerprint), mutate, updateNetworkInterface, wait.
   * A stale fingerprint (412) reads again and re-applies mutate. mutate returns undefined when nothing changes.
   * Returns the number of update calls made (0 when nothing had to change).
   */
  async updateAliases(
    zone: string,
    instance: string,
    nicName: string,
    mutate: (current: AliasIpRange[]) => AliasIpRange[] | undefined,
  ): Promise<number> {
    const until = Date.now() + (this.opts.operationTimeoutMs ?? 120_000);
    let calls = 0;
    const apply = async (): Promise<number> => {
      const inst = await this.getInstance(zone, instance);
      const nic = inst.networkInterfaces?.find((n) => n.name === nicName);
      if (!nic) throw new GceError(`instances.get ${instance}`, 404, 'notFound', `network interface ${nicName} not found`);
      const next = mutate(nic.aliasIpRanges ?? []);
      if (!next) return calls;
      calls++;
      const op = await this.updateNetworkInterface(zone, instance, { name: nicName, fingerprint: nic.fingerprint, aliasIpRanges: next });
      await this.waitZoneOperation(zone, op);
      return calls;
    };
    const rereads: Backoff = { steps: this.opts.maxAttempts ?? 8, initialMs: 0, factor: 1, jitter: 0, capMs: 0 };
    return retry({ backoff: rereads, retriable: isStale }, () => this.whileBusy(apply, until));
  }

  // provisioner

  getSubnetwork(region: string, name: string): Promise<Subnetwork> {
    return this.withRetry(() =>
      this.call<Subnetwork>(
        `subnetworks.get ${name}`,
        'GET',
        `${this.endpoint}/projects/${this.project}/regions/${region}/subnetworks/${name}`,
      ),
    );
  }

  async patchSubnetwork(region: string, name: string, body: Partial<Subnetwork> & { fingerprint?: string }): Promise<void> {
    const op = await this.withRetry(() =>
      this.call<Operation>(
        `subnetworks.patch ${name}`,
        'PATCH',
        `${this.endpoint}/projects/${this.project}/regions/${region}/subnetworks/${name}?requestId=${randomUUID()}`,
        body,
      ),
    );
    let cur = op;
    const deadline = Date.now() + (this.opts.operationTimeoutMs ?? 120_000);
    while (cur.status !== 'DONE') {
      if (Date.now() > deadline) throw new GceError(`operation ${op.name}`, 0, 'timeout', 'not DONE');
      cur = await this.withRetry(() =>
        this.call<Operation>(
          `regionOperations.wait ${op.name}`,
          'POST',
          `${this.endpoint}/projects/${this.project}/regions/${region}/operations/${op.name}/wait`,
        ),
      );
    }
    if (cur.error?.errors?.length) throw new GceOperationError(cur);
  }

  getInternalRange(id: string): Promise<InternalRange> {
    return this.withRetry(() =>
      this.call<InternalRange>(
        `internalRanges.get ${id}`,
        'GET',
        `${this.ncEndpoint}/projects/${this.project}/locations/global/internalRanges/${id}`,
      ),
    );
  }

  /** Creates and waits for the long-running operation; returns the range as stored (ipCidrRange filled). */
  async createInternalRange(id: string, body: InternalRange): Promise<InternalRange> {
    let op = await this.withRetry(() =>
      this.call<{ name: string; done?: boolean; error?: { message: string } }>(
        `internalRanges.create ${id}`,
        'POST',
        `${this.ncEndpoint}/projects/${this.project}/locations/global/internalRanges?internalRangeId=${id}&requestId=${randomUUID()}`,
        body,
      ),
    );
    const deadline = Date.now() + (this.opts.operationTimeoutMs ?? 120_000);
    while (!op.done) {
      if (Date.now() > deadline) throw new GceError(`operation ${op.name}`, 0, 'timeout', 'not done');
      await sleep(200);
      op = await this.withRetry(() => this.call(`operations.get ${op.name}`, 'GET', `${this.ncEndpoint}/${op.name}`));
    }
    if (op.error) throw new GceError(`internalRanges.create ${id}`, 0, 'OPERATION_FAILED', op.error.message);
    return this.getInternalRange(id);
  }
}

export interface Subnetwork {
  name: string;
  network?: string;
  region?: string;
  ipCidrRange: string;
  fingerprint?: string;
  secondaryIpRanges?: { rangeName: string; ipCidrRange?: string; reservedInternalRange?: string }[];
}

export interface InternalRange {
  name?: string;
  network: string;
  ipCidrRange?: string;
  prefixLength?: number;
  targetCidrRange?: string[];
  usage?: 'FOR_VPC' | 'EXTERNAL_TO_VPC';
  peering?: 'FOR_SELF' | 'FOR_PEER' | 'NOT_SHARED';
  description?: string;
}

/** Access token from the GCE metadata server (cached for the process). */
export function metadataToken(base = 'http://169.254.169.254'): () => Promise<string> {
  let cached: { token: string; until: number } | undefined;
  return async () => {
    if (cached && Date.now() < cached.until) return cached.token;
    const res = await fetch(`${base}/computeMetadata/v1/instance/service-accounts/default/token`, {
      headers: { 'Metadata-Flavor': 'Google' },
    });
    if (!res.ok) throw new GceError('metadata token', res.status, 'metadata', await res.text());
    const j = (await res.json()) as { access_token: string; expires_in: number };
    cached = { token: j.access_token, until: Date.now() + (j.expires_in - 60) * 1000 };
    return j.access_token;
  };
}
