// A local emulator of the parts of the GCE compute API (and Network Connectivity internalRanges) gcp-ipam uses,
// following the API reference: instances.get; instances.updateNetworkInterface (fingerprint required -> 400,
// stale -> 412 conditionNotMet, requestId makes a retry return the same operation, a second update while one
// runs on the instance -> 400 resourceNotReady); zoneOperations get/wait with a configurable duration
// (default 3 s, the anchor's measured alias-update latency); 403 rateLimitExceeded on demand or above a rate
// quota: per project, per quota group, per minute, refilled at the start of each minute (Compute Engine's
// api-quota page: `default` for mutations, `read_requests` for *.get, `operation_read_requests`).
// An alias /32 attached to another instance makes the operation finish with an error (IP in use).
//
// Also the metadata server's access token (Metadata-Flavor: Google, or 403 as on a VM) and the project ID, and
// a control API under /_emulator/ (state, instances, subnets, injected errors, operation duration, quotas) for a
// user or a test driving the program (src/cmd/gce-emulator.ts, `npm run gce-emulator`) from outside.
//
// Only erasable TypeScript (no enums, no parameter properties) and Node built-ins: the benchmark runs this file
// directly with Node's type stripping.
import * as http from 'node:http';
import { createHash, randomUUID } from 'node:crypto';

export interface FakeAlias {
  ipCidrRange: string;
  subnetworkRangeName?: string;
}
export interface FakeNic {
  name: string;
  network: string;
  subnetwork: string;
  networkIP: string;
  fingerprint: string;
  aliasIpRanges: FakeAlias[];
}
export interface FakeInstance {
  name: string;
  zone: string;
  networkInterfaces: FakeNic[];
  busyUntil: number;
}
interface FakeOp {
  name: string;
  zone?: string;
  region?: string;
  operationType: string;
  targetLink: string;
  doneAt: number;
  apply?: () => string | undefined;
  error?: { code: string; message: string };
  done: boolean;
}
export interface Injected {
  status: number;
  reason: string;
  message?: string;
}
/** Compute Engine's rate quota groups of the calls emulated here. */
export type QuotaGroup = 'default' | 'read_requests' | 'operation_read_requests';
const QUOTA_GROUP: Record<string, QuotaGroup> = {
  'instances.get': 'read_requests',
  'subnetworks.get': 'read_requests',
  'instances.updateNetworkInterface': 'default',
  'subnetworks.patch': 'default',
  'zoneOperations.get': 'operation_read_requests',
  'zoneOperations.wait': 'operation_read_requests',
  'regionOperations.get': 'operation_read_requests',
  'regionOperations.wait': 'operation_read_requests',
};
const RATE_LIMITED: Injected = { status: 403, reason: 'rateLimitExceeded', message: 'Rate Limit Exceeded' };

export interface FakeGceOptions {
  project?: string;
  /** How long each updateNetworkInterface / subnetworks.patch operation stays RUNNING. Default 3000 ms. */
  opDurationMs?: number;
  /** Rate quotas per minute by group (Compute Engine's defaults are 1500 each). Default: none. */
  quotas?: Partial<Record<QuotaGroup, number>>;
  /** Reject an update while another operation runs on the same instance (400 resourceNotReady). Default true. */
  rejectWhileBusy?: boolean;
  /**
   * Called when an operation has changed an instance's aliases, in order (one call at a time): what the VPC does
   * when it starts or stops routing an alias range to a VM. A node lab routes the range to the node here.
   */
  onAliasChange?: (change: AliasChange) => void | Promise<void>;
}

export interface AliasChange {
  kind: 'add' | 'remove';
  /** The alias range, e.g. 10.111.0.5/32. */
  range: string;
  instance: string;
  zone: string;
  /** The VM's primary address (nic0's networkIP): where the VPC sends the range. */
  networkIP: string;
}

const fp = (v: unknown): string =>
  createHash('sha256')
    .update(JSON.stringify(v) + randomUUID())
    .digest('base64')
    .slice(0, 12);

export class FakeGce {
  readonly project: string;
  opDurationMs: number;
  /** Per-minute quota of each limited group, and what it used in the current minute. */
  readonly quotas = new Map<QuotaGroup, { perMinute: number; minute: number; used: number }>();
  rejectWhileBusy: boolean;
  readonly instances = new Map<string, FakeInstance>();
  readonly subnets = new Map<
    string,
    {
      name: string;
      region: string;
      network: string;
      ipCidrRange: string;
      fingerprint: string;
      secondaryIpRanges: { rangeName: string; ipCidrRange?: string; reservedInternalRange?: string }[];
    }
  >();
  readonly internalRanges = new Map<
    string,
    { name: string; network: string; ipCidrRange: string; prefixLength?: number; usage?: string }
  >();
  readonly ops = new Map<string, FakeOp>();
  readonly requestIds = new Map<string, string>();
  /** Calls per kind: "instances.get", "instances.updateNetworkInterface", "zoneOperations.wait", ... */
  readonly calls: Record<string, number> = {};
  /** Every accepted updateNetworkInterface: instance and the aliases it asked for. */
  readonly updates: { instance: string; aliases: string[]; at: number }[] = [];
  private readonly injected = new Map<string, Injected[]>();
  private server: http.Server | undefined;
  private opSeq = 0;
  private readonly onAliasChange: FakeGceOptions['onAliasChange'];
  /** The alias hooks run one after another, in the order the operations completed. */
  private hooks: Promise<void> = Promise.resolve();
  /** Hook failures (a hook cannot fail an operation that already completed; they are reported in the state). */
  readonly hookErrors: string[] = [];
  url = '';

  constructor(opts: FakeGceOptions = {}) {
    this.project = opts.project ?? 'test-project';
    this.opDurationMs = opts.opDurationMs ?? 3000;
    for (const [group, perMinute] of Object.entries(opts.quotas ?? {})) this.setQuota(group as QuotaGroup, perMinute);
    this.rejectWhileBusy = opts.rejectWhileBusy ?? true;
    this.onAliasChange = opts.onAliasChange;
  }

  addInstance(zone: string, name: string, networkIP = '10.0.0.2'): FakeInstance {
    const inst: FakeInstance = {
      name,
      zone,
      busyUntil: 0,
      networkInterfaces: [
        {
          name: 'nic0',
          network: `projects/${this.project}/global/networks/default`,
          subnetwork: `projects/${this.project}/regions/${zone.replace(/-[a-z]$/, '')}/subnetworks/default`,
          networkIP,
          fingerprint: fp(name),
          aliasIpRanges: [],
        },
      ],
    };
    this.instances.set(`${zone}/${name}`, inst);
    return inst;
  }

  addSubnet(region: string, name: string, ipCidrRange: string, network = `projects/${this.project}/global/networks/default`): void {
    this.subnets.set(`${region}/${name}`, { name, region, network, ipCidrRange, fingerprint: fp(name), secondaryIpRanges: [] });
  }

  aliasesOf(zone: string, name: string): string[] {
    this.settleAll();
    return (this.instances.get(`${zone}/${name}`)?.networkInterfaces[0]?.aliasIpRanges ?? []).map((a) => a.ipCidrRange);
  }

  /** The next `count` calls of `kind` (e.g. "instances.updateNetworkInterface") fail with this error. */
  inject(kind: string, err: Injected, count = 1): void {
    const q = this.injected.get(kind) ?? [];
    for (let i = 0; i < count; i++) q.push(err);
    this.injected.set(kind, q);
  }

  resetCounters(): void {
    for (const k of Object.keys(this.calls)) delete this.calls[k];
    this.updates.length = 0;
  }

  async start(port = 0, host = '127.0.0.1'): Promise<string> {
    this.server = http.createServer((req, res) => {
      this.handle(req, res).catch((err: Error) => this.send(res, 500, errorBody(500, 'backendError', err.message)));
    });
    this.server.keepAliveTimeout = 60_000;
    await new Promise<void>((resolve) => this.server!.listen(port, host, () => resolve()));
    const addr = this.server.address() as { port: number };
    this.url = `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${addr.port}`;
    return this.url;
  }

  /** What the control API's GET /_emulator/state answers: instances with their aliases, subnets, calls so far. */
  state(): unknown {
    this.settleAll();
    return {
      project: this.project,
      opDurationMs: this.opDurationMs,
      quotas: Object.fromEntries([...this.quotas].map(([g, q]) => [g, q.perMinute])),
      instances: [...this.instances.values()].map((i) => ({
        zone: i.zone,
        name: i.name,
        networkInterfaces: i.networkInterfaces.map((n) => ({ name: n.name, networkIP: n.networkIP, aliasIpRanges: n.aliasIpRanges })),
      })),
      subnets: [...this.subnets.values()],
      calls: this.calls,
      hookErrors: this.hookErrors,
    };
  }

  /** Compute API base for GceClient's `endpoint`. */
  get computeEndpoint(): string {
    return `${this.url}/compute/v1`;
  }
  get networkConnectivityEndpoint(): string {
    return `${this.url}/v1`;
  }

  async stop(): Promise<void> {
    if (!this.server) return;
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server!.close(() => resolve()));
    this.server = undefined;
  }

  private send(res: http.ServerResponse, status: number, body: unknown): void {
    const text = JSON.stringify(body);
    res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
    res.end(text);
  }

  /** Counts a call; the error it gets: an injected one first, then 403 rateLimitExceeded above its quota. */
  private count(kind: string): Injected | undefined {
    this.calls[kind] = (this.calls[kind] ?? 0) + 1;
    const q = this.injected.get(kind);
    if (q && q.length) return q.shift();
    return this.overQuota(kind) ? RATE_LIMITED : undefined;
  }

  /** A group's requests per minute; undefined lifts its quota. */
  setQuota(group: QuotaGroup, perMinute: number | undefined): void {
    if (perMinute === undefined) this.quotas.delete(group);
    else this.quotas.set(group, { perMinute, minute: 0, used: 0 });
  }

  /** Whether a call of `kind` is over its group's quota (the quota refills at the start of each minute). */
  private overQuota(kind: string): boolean {
    const q = this.quotas.get(QUOTA_GROUP[kind]!);
    if (!q) return false;
    const minute = Math.floor(Date.now() / 60_000);
    if (minute !== q.minute) Object.assign(q, { minute, used: 0 });
    if (q.used >= q.perMinute) return true;
    q.used++;
    return false;
  }

  private newOp(kind: string, target: string, where: { zone?: string; region?: string }, apply?: () => string | undefined): FakeOp {
    const op: FakeOp = {
      name: `operation-${Date.now()}-${++this.opSeq}`,
      operationType: kind,
      targetLink: target,
      doneAt: Date.now() + this.opDurationMs,
      apply,
      done: false,
      ...where,
    };
    this.ops.set(op.name, op);
    // An operation completes at its time whether or not anyone polls it (its effects, hooks included, are due then).
    if (apply) setTimeout(() => this.settle(op), Math.max(0, op.doneAt - Date.now())).unref();
    return op;
  }

  /** Queues the alias hook for what an operation changed on an instance's nic. */
  private aliasesChanged(inst: FakeInstance, nic: FakeNic, before: string[]): void {
    const hook = this.onAliasChange;
    if (!hook) return;
    const after = nic.aliasIpRanges.map((a) => a.ipCidrRange);
    const base = { instance: inst.name, zone: inst.zone, networkIP: nic.networkIP };
    const changes: AliasChange[] = [
      ...before.filter((r) => !after.includes(r)).map((range) => ({ ...base, kind: 'remove' as const, range })),
      ...after.filter((r) => !before.includes(r)).map((range) => ({ ...base, kind: 'add' as const, range })),
    ];
    for (const c of changes) {
      this.hooks = this.hooks
        .then(() => hook(c))
        .catch((err: unknown) => {
          this.hookErrors.push(`${c.kind} ${c.range} on ${c.instance}: ${(err as Error).message}`);
        });
    }
  }

  private settleAll(): void {
    for (const op of this.ops.values()) if (!op.done) this.settle(op);
  }

  private settle(op: FakeOp): void {
    if (op.done || Date.now() < op.doneAt) return;
    op.done = true;
    const err = op.apply?.();
    if (err) op.error = { code: 'IP_IN_USE_BY_ANOTHER_RESOURCE', message: err };
  }

  private opJson(op: FakeOp): unknown {
    this.settle(op);
    const base = `${this.url}/compute/v1/projects/${this.project}/${op.zone ? `zones/${op.zone}` : `regions/${op.region}`}/operations/${op.name}`;
    return {
      kind: 'compute#operation',
      name: op.name,
      operationType: op.operationType,
      targetLink: op.targetLink,
      selfLink: base,
      status: op.done ? 'DONE' : 'RUNNING',
      ...(op.zone ? { zone: op.zone } : { region: op.region }),
      ...(op.error ? { error: { errors: [op.error] }, httpErrorStatusCode: 400 } : {}),
    };
  }

  private async body(req: http.IncomingMessage): Promise<Record<string, unknown>> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    if (!text) return {};
    return JSON.parse(text) as Record<string, unknown>;
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const u = new URL(req.url ?? '/', 'http://x');
    const p = u.pathname;
    this.settleAll();
    let m: RegExpMatchArray | null;
    const method = req.method ?? 'GET';
    if (p.startsWith('/_emulator/')) return this.control(method, p, await this.body(req), res);
    if (p.startsWith('/computeMetadata/v1/')) return this.metadata(req, p, res);
    const fail = (inj: Injected | undefined): boolean => {
      if (!inj) return false;
      this.send(res, inj.status, errorBody(inj.status, inj.reason, inj.message ?? inj.reason));
      return true;
    };

    if ((m = p.match(/^\/compute\/v1\/projects\/([^/]+)\/zones\/([^/]+)\/instances\/([^/]+)$/)) && method === 'GET') {
      if (fail(this.count('instances.get'))) return;
      const inst = this.instances.get(`${m[2]}/${m[3]}`);
      if (!inst)
        return this.send(
          res,
          404,
          errorBody(404, 'notFound', `The resource 'projects/${m[1]}/zones/${m[2]}/instances/${m[3]}' was not found`),
        );
      return this.send(res, 200, { kind: 'compute#instance', name: inst.name, zone: inst.zone, networkInterfaces: inst.networkInterfaces });
    }
    if (
      (m = p.match(/^\/compute\/v1\/projects\/([^/]+)\/zones\/([^/]+)\/instances\/([^/]+)\/updateNetworkInterface$/)) &&
      (method === 'PATCH' || method === 'POST')
    ) {
      const body = await this.body(req);
      if (fail(this.count('instances.updateNetworkInterface'))) return;
      const requestId = u.searchParams.get('requestId');
      if (requestId && this.requestIds.has(requestId))
        return this.send(res, 200, this.opJson(this.ops.get(this.requestIds.get(requestId)!)!));
      const inst = this.instances.get(`${m[2]}/${m[3]}`);
      if (!inst) return this.send(res, 404, errorBody(404, 'notFound', `instance ${m[3]} not found`));
      const nicName = u.searchParams.get('networkInterface');
      if (!nicName) return this.send(res, 400, errorBody(400, 'required', "Required field 'networkInterface' not specified"));
      const nic = inst.networkInterfaces.find((n) => n.name === nicName);
      if (!nic) return this.send(res, 400, errorBody(400, 'invalid', `Invalid value for field 'networkInterface': '${nicName}'`));
      if (typeof body.fingerprint !== 'string' || body.fingerprint === '') {
        return this.send(res, 400, errorBody(400, 'required', "Required field 'resource.fingerprint' not specified"));
      }
      if (body.fingerprint !== nic.fingerprint) {
        return this.send(res, 412, errorBody(412, 'conditionNotMet', 'Supplied fingerprint does not match current metadata fingerprint.'));
      }
      if (this.rejectWhileBusy && Date.now() < inst.busyUntil) {
        return this.send(
          res,
          400,
          errorBody(400, 'resourceNotReady', `The resource 'projects/${m[1]}/zones/${m[2]}/instances/${m[3]}' is not ready`),
        );
      }
      const aliases = Array.isArray(body.aliasIpRanges) ? (body.aliasIpRanges as FakeAlias[]) : [];
      for (const a of aliases) {
        if (typeof a.ipCidrRange !== 'string' || !/^\d+\.\d+\.\d+\.\d+(\/\d+)?$/.test(a.ipCidrRange)) {
          return this.send(res, 400, errorBody(400, 'invalid', `Invalid value for field 'resource.aliasIpRanges': ${JSON.stringify(a)}`));
        }
      }
      nic.fingerprint = fp(aliases);
      inst.busyUntil = Date.now() + this.opDurationMs;
      this.updates.push({ instance: inst.name, aliases: aliases.map((a) => a.ipCidrRange), at: Date.now() });
      const op = this.newOp('updateNetworkInterface', `instances/${inst.name}`, { zone: inst.zone }, () => {
        for (const a of aliases) {
          for (const other of this.instances.values()) {
            if (other === inst) continue;
            if (other.networkInterfaces.some((n) => n.aliasIpRanges.some((o) => o.ipCidrRange === a.ipCidrRange))) {
              return `IP '${a.ipCidrRange}' is already being used by another resource: instance ${other.name}`;
            }
          }
        }
        const before = nic.aliasIpRanges.map((a) => a.ipCidrRange);
        nic.aliasIpRanges = aliases.map((a) => ({ ...a }));
        nic.fingerprint = fp(aliases);
        this.aliasesChanged(inst, nic, before);
        return undefined;
      });
      if (requestId) this.requestIds.set(requestId, op.name);
      return this.send(res, 200, this.opJson(op));
    }
    if ((m = p.match(/^\/compute\/v1\/projects\/([^/]+)\/(zones|regions)\/([^/]+)\/operations\/([^/]+)(\/wait)?$/))) {
      const wait = Boolean(m[5]);
      if (fail(this.count(`${m[2] === 'zones' ? 'zone' : 'region'}Operations.${wait ? 'wait' : 'get'}`))) return;
      const op = this.ops.get(m[4]!);
      if (!op) return this.send(res, 404, errorBody(404, 'notFound', `operation ${m[4]} not found`));
      if (wait && !op.done) {
        // like the real wait: returns when DONE or after a while (capped here at 2 min)
        await new Promise((r) => setTimeout(r, Math.max(0, Math.min(op.doneAt - Date.now(), 120_000))));
      }
      return this.send(res, 200, this.opJson(op));
    }
    if ((m = p.match(/^\/compute\/v1\/projects\/([^/]+)\/regions\/([^/]+)\/subnetworks\/([^/]+)$/))) {
      const sn = this.subnets.get(`${m[2]}/${m[3]}`);
      if (method === 'GET') {
        if (fail(this.count('subnetworks.get'))) return;
        if (!sn) return this.send(res, 404, errorBody(404, 'notFound', `subnetwork ${m[3]} not found`));
        return this.send(res, 200, { kind: 'compute#subnetwork', ...sn });
      }
      const body = await this.body(req);
      if (fail(this.count('subnetworks.patch'))) return;
      if (!sn) return this.send(res, 404, errorBody(404, 'notFound', `subnetwork ${m[3]} not found`));
      if (typeof body.fingerprint !== 'string')
        return this.send(res, 400, errorBody(400, 'required', "Required field 'resource.fingerprint' not specified"));
      if (body.fingerprint !== sn.fingerprint)
        return this.send(res, 412, errorBody(412, 'conditionNotMet', 'Supplied fingerprint does not match current fingerprint.'));
      const ranges =
        (body.secondaryIpRanges as { rangeName: string; ipCidrRange?: string; reservedInternalRange?: string }[] | undefined) ??
        sn.secondaryIpRanges;
      for (const r of ranges) {
        if (r.reservedInternalRange && !r.ipCidrRange) {
          const id = r.reservedInternalRange.split('/').pop()!;
          const ir = this.internalRanges.get(id);
          if (!ir) return this.send(res, 400, errorBody(400, 'invalid', `internal range ${r.reservedInternalRange} not found`));
          r.ipCidrRange = ir.ipCidrRange;
        }
      }
      sn.fingerprint = fp(ranges);
      sn.secondaryIpRanges = ranges;
      const op = this.newOp('patch', `subnetworks/${sn.name}`, { region: sn.region });
      op.doneAt = Date.now() + Math.min(this.opDurationMs, 200);
      return this.send(res, 200, this.opJson(op));
    }
    if ((m = p.match(/^\/v1\/projects\/([^/]+)\/locations\/global\/internalRanges(?:\/([^/]+))?$/))) {
      if (method === 'GET' && m[2]) {
        if (fail(this.count('internalRanges.get'))) return;
        const ir = this.internalRanges.get(m[2]);
        if (!ir) return this.send(res, 404, errorBody(404, 'NOT_FOUND', `internal range ${m[2]} not found`));
        return this.send(res, 200, ir);
      }
      const body = await this.body(req);
      if (fail(this.count('internalRanges.create'))) return;
      const id = u.searchParams.get('internalRangeId') ?? `range-${++this.opSeq}`;
      if (this.internalRanges.has(id)) return this.send(res, 409, errorBody(409, 'ALREADY_EXISTS', `internal range ${id} already exists`));
      const prefix = Number(body.prefixLength ?? 16);
      const target = ((body.targetCidrRange as string[] | undefined) ?? ['10.0.0.0/8'])[0]!;
      const cidr = this.freeRange(target, prefix);
      if (!cidr) return this.send(res, 400, errorBody(400, 'FAILED_PRECONDITION', `no free /${prefix} in ${target}`));
      const name = `projects/${m[1]}/locations/global/internalRanges/${id}`;
      this.internalRanges.set(id, {
        name,
        network: String(body.network),
        ipCidrRange: cidr,
        prefixLength: prefix,
        usage: String(body.usage ?? 'FOR_VPC'),
      });
      return this.send(res, 200, { name: `projects/${m[1]}/locations/global/operations/op-${id}`, done: true, response: { name } });
    }
    if ((m = p.match(/^\/v1\/(projects\/[^/]+\/locations\/global\/operations\/[^/]+)$/))) {
      return this.send(res, 200, { name: m[1], done: true });
    }
    this.send(res, 404, errorBody(404, 'notFound', `gce emulator: no route ${method} ${p}`));
  }

  /** The control API: not GCE's; how a program outside drives what the tests do in-process. */
  private control(method: string, p: string, body: Record<string, unknown>, res: http.ServerResponse): void {
    const str = (k: string): string => String(body[k] ?? '');
    if (method === 'GET' && p === '/_emulator/state') return this.send(res, 200, this.state());
    if (method === 'POST' && p === '/_emulator/instances') {
      if (!str('zone') || !str('name')) return this.send(res, 400, { error: 'zone and name are required' });
      return this.send(res, 200, this.addInstance(str('zone'), str('name'), str('networkIP') || undefined));
    }
    if (method === 'POST' && p === '/_emulator/subnets') {
      if (!str('region') || !str('name') || !str('ipCidrRange'))
        return this.send(res, 400, { error: 'region, name and ipCidrRange are required' });
      this.addSubnet(str('region'), str('name'), str('ipCidrRange'));
      return this.send(res, 200, this.subnets.get(`${str('region')}/${str('name')}`));
    }
    if (method === 'POST' && p === '/_emulator/inject') {
      const status = Number(body.status);
      if (!str('kind') || !(status >= 400) || !str('reason'))
        return this.send(res, 400, { error: 'kind, status >= 400 and reason are required' });
      this.inject(str('kind'), { status, reason: str('reason'), message: str('message') || undefined }, Number(body.count ?? 1));
      return this.send(res, 200, {});
    }
    if (method === 'PUT' && p === '/_emulator/config') {
      if (typeof body.opDurationMs === 'number') this.opDurationMs = body.opDurationMs;
      if (body.quotas === null) this.quotas.clear();
      else if (typeof body.quotas === 'object' && body.quotas)
        for (const [group, perMinute] of Object.entries(body.quotas as Record<string, number | null>))
          this.setQuota(group as QuotaGroup, perMinute ?? undefined);
      if (typeof body.rejectWhileBusy === 'boolean') this.rejectWhileBusy = body.rejectWhileBusy;
      return this.send(res, 200, this.state());
    }
    this.send(res, 404, { error: `gce emulator: no control route ${method} ${p}` });
  }

  /** The metadata server's parts gcp-ipam reads: a VM answers only requests that carry Metadata-Flavor: Google. */
  private metadata(req: http.IncomingMessage, p: string, res: http.ServerResponse): void {
    if (req.headers['metadata-flavor'] !== 'Google') {
      res.writeHead(403, { 'Content-Type': 'text/html' });
      return void res.end('Missing required header: Metadata-Flavor');
    }
    if (p === '/computeMetadata/v1/instance/service-accounts/default/token')
      return this.send(res, 200, { access_token: `emulated-${randomUUID()}`, expires_in: 3599, token_type: 'Bearer' });
    if (p === '/computeMetadata/v1/project/project-id') {
      res.writeHead(200, { 'Content-Type': 'application/text', 'Metadata-Flavor': 'Google' });
      return void res.end(this.project);
    }
    res.writeHead(404, { 'Content-Type': 'text/html' });
    res.end('Not Found');
  }

  private freeRange(target: string, prefix: number): string | undefined {
    const [base, bits] = target.split('/');
    const toInt = (ip: string): number => ip.split('.').reduce((a, o) => a * 256 + Number(o), 0);
    const toIp = (n: number): string => [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');
    const start = toInt(base!);
    const size = 2 ** (32 - prefix);
    const count = 2 ** (prefix - Number(bits));
    const taken = [...this.internalRanges.values()].map((r) => r.ipCidrRange);
    for (const s of this.subnets.values()) taken.push(s.ipCidrRange, ...s.secondaryIpRanges.map((r) => r.ipCidrRange ?? ''));
    const overlaps = (a: string, bStart: number, bSize: number): boolean => {
      if (!a) return false;
      const [ab, ap] = a.split('/');
      const aStart = toInt(ab!);
      const aSize = 2 ** (32 - Number(ap));
      return aStart < bStart + bSize && bStart < aStart + aSize;
    };
    for (let i = 1; i < count; i++) {
      // skip the first block, like a real reservation avoiding 10.0.0.0/16
      const s = start + i * size;
      if (!taken.some((t) => overlaps(t, s, size))) return `${toIp(s)}/${prefix}`;
    }
    return undefined;
  }
}

function errorBody(code: number, reason: string, message: string): unknown {
  return { error: { code, message, errors: [{ domain: 'global', reason, message }] } };
}
