/**
 * A local emulator of the Alibaba Cloud ECS (2014-05-26) and VPC (2016-04-28)
 * OpenAPI, RPC style, for tests, the benchmark and users' rehearsals (the
 * program: src/cmd/aliyun-emulator.ts). One HTTP server answers both products
 * (told apart by the version). It follows the API reference:
 *
 * - the action comes from the `x-acs-action` header (V3 signature, what
 *   terway's client and the official SDKs send) or the `Action` query
 *   parameter (classic RPC, taken unsigned here);
 *   parameters from the query string and a form body; flat `Name.N` lists;
 * - V3 requests are checked: ACS3-HMAC-SHA256 over the canonical request,
 *   unknown AccessKeyId 404 InvalidAccessKeyId.NotFound, bad signature 400
 *   SignatureDoesNotMatch, a common header present but left out of
 *   SignedHeaders (host, x-acs-*: the documentation requires them all
 *   signed) 400 IncompleteSignature;
 * - JSON answers with RequestId; errors {RequestId, HostId, Code, Message,
 *   Recommend} with the documented HTTP statuses (400 InvalidParameter /
 *   MissingParameter / Throttling, 403 InvalidOperation.* / quota, 404 *.NotFound,
 *   500 InternalError, 503 ServiceUnavailable);
 * - ENIs go Available -> Attaching -> InUse on attach and InUse -> Detaching
 *   -> Available on detach after `attachDelayMs`; DescribeNetworkInterfaces
 *   pages with NextToken/MaxResults (10..500, default 10);
 * - DescribeInstanceTypes gives EniQuantity / EniPrivateIpAddressQuantity;
 *   an instance holds at most EniQuantity ENIs (its primary one included),
 *   an ENI at most EniPrivateIpAddressQuantity IPs when attached;
 * - injected latency per action, failures (code/status, n times) and a
 *   per-action rate limit (calls per window) answering Throttling;
 * - eventual consistency: a created ENI can stay out of DescribeNetworkInterfaces
 *   for `visibleAfterMs`, as the API's reads lag its writes;
 * - a control API under /_emulator/ (not Alibaba's) for a program driving it.
 * - trunk ENIs (CreateNetworkInterface InstanceType=Trunk) on types with
 *   EniTrunkSupported, member ENIs through AttachNetworkInterface
 *   TrunkNetworkInstanceId, at most EniTotalQuantity - EniQuantity of them;
 * - IPv6 on vSwitches with an Ipv6CidrBlock: Ipv6AddressCount at creation,
 *   AssignIpv6Addresses / UnassignIpv6Addresses (at most EniIpv6AddressQuantity
 *   per ENI), Ipv6Sets in DescribeNetworkInterfaces, the metadata
 *   `network/interfaces/macs/<mac>/ipv6-gateway`.
 */
import { createHash, createHmac, randomBytes } from 'node:crypto';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { ip } from '@cnikit/netlib';

export const ECS_VERSION = '2014-05-26';
export const VPC_VERSION = '2016-04-28';

export type EniStatus = 'Available' | 'Attaching' | 'InUse' | 'Detaching' | 'Deleting';

export type EniType = 'Primary' | 'Secondary' | 'Trunk' | 'Member';

export interface FakeEni {
  id: string;
  /** DescribeNetworkInterfaces `Type`; a member ENI is a Secondary one attached through a trunk. */
  type: EniType;
  status: EniStatus;
  vswitchId: string;
  securityGroupIds: string[];
  mac: string;
  primaryIp: string;
  secondaryIps: string[];
  ipv6s: string[];
  instanceId?: string;
  /** Set when attached as a member of a trunk ENI (AttachNetworkInterface TrunkNetworkInstanceId). */
  trunkEniId?: string;
  /** Attachment.DeviceIndex while attached. */
  deviceIndex?: number;
  description?: string;
  creationTime: string;
  /** Epoch ms from which DescribeNetworkInterfaces lists it (visibleAfterMs). */
  visibleAt?: number;
}

export interface FakeVSwitch {
  id: string;
  vpcId: string;
  zoneId: string;
  cidr: string;
  used: Set<string>;
  /** Ipv6CidrBlock (a /64) when IPv6 is on for the vSwitch. */
  ipv6Cidr?: string;
  used6: Set<string>;
}

export interface FakeInstanceType {
  eniQuantity: number;
  eniPrivateIpAddressQuantity: number;
  eniIpv6AddressQuantity?: number;
  /** EniTrunkSupported: the type can hold a trunk ENI and member ENIs through it. */
  eniTrunkSupported?: boolean;
  /**
   * EniTotalQuantity: every ENI the instance can hold, member ENIs of its trunk included
   * (default eniQuantity: no room for members).
   */
  eniTotalQuantity?: number;
}

export interface FakeInstance {
  id: string;
  type: string;
  zoneId: string;
  vswitchId: string;
}

export interface Fault {
  code: string;
  status: number;
  message?: string;
  /** How many calls fail (default 1). */
  times?: number;
}

export interface FakeOpenApiOptions {
  regionId?: string;
  accessKeys?: Record<string, string>;
  /** Time an attach or detach takes (default 30 ms). */
  attachDelayMs?: number;
  /** Latency added to every call, or per action. */
  latencyMs?: number | Record<string, number>;
  /** How long a created ENI stays out of DescribeNetworkInterfaces (the API's eventual consistency). Default 0. */
  visibleAfterMs?: number;
  /** Called when an attach completes, before the ENI shows InUse / after a detach (datapath tests plug a link here). */
  onAttached?: (eni: FakeEni) => void | Promise<void>;
  onDetached?: (eni: FakeEni) => void | Promise<void>;
  /**
   * Called when private IPv4 addresses join or leave a non-primary ENI (its creation, AssignPrivateIpAddresses,
   * UnassignPrivateIpAddresses, its deletion): where the VPC delivers them. The primary ENI is the VM's own NIC.
   */
  onAddresses?: (change: AddressChange) => void;
}

/** Addresses that joined (`added`) or left (`removed`) an ENI, in the order the API changed them. */
export interface AddressChange {
  eni: FakeEni;
  added: string[];
  removed: string[];
}

class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** An API call's parameters, flat as the RPC style sends them. */
type Params = Record<string, string>;
type ActionHandler = (p: Params) => Record<string, unknown>;

const MAX_ASSIGN_PER_CALL = 10;
const MAX_SECONDARY_ON_CREATE = 49;

/** The V3 signature's percent-encoding: UTF-8, RFC 3986, only `A-Z a-z 0-9 - _ . ~` left as they are. */
export function acsEncode(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

export class FakeOpenApi {
  readonly regionId: string;
  readonly enis = new Map<string, FakeEni>();
  readonly vswitches = new Map<string, FakeVSwitch>();
  readonly instanceTypes = new Map<string, FakeInstanceType>();
  readonly instances = new Map<string, FakeInstance>();
  readonly calls: { action: string; params: Record<string, string> }[] = [];
  private readonly faults = new Map<string, Fault[]>();
  private readonly limits = new Map<string, { count: number; windowMs: number; stamps: number[] }>();
  private server: http.Server | undefined;
  private seq = 0;
  private readonly accessKeys: Record<string, string>;
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor(private readonly opts: FakeOpenApiOptions = {}) {
    this.regionId = opts.regionId ?? 'cn-hangzhou';
    this.accessKeys = opts.accessKeys ?? { 'LTAI-test': 'test-secret' };
  }

  // ---- set-up ----

  addVSwitch(id: string, zoneId: string, cidr: string, vpcId = 'vpc-test', ipv6Cidr?: string): FakeVSwitch {
    const v: FakeVSwitch = { id, vpcId, zoneId, cidr, used: new Set(), used6: new Set(), ...(ipv6Cidr ? { ipv6Cidr } : {}) };
    this.vswitches.set(id, v);
    return v;
  }

  addInstanceType(name: string, t: FakeInstanceType): void {
    this.instanceTypes.set(name, t);
  }

  /** An instance with its primary ENI (InUse) in `vswitchId`, at `primaryIp` when given (a node's own address). */
  addInstance(id: string, type: string, vswitchId: string, primaryIp?: string): FakeInstance {
    const v = this.vsw(vswitchId);
    const inst: FakeInstance = { id, type, zoneId: v.zoneId, vswitchId };
    this.instances.set(id, inst);
    const eni = this.newEni(v, [], 0, 'Primary', primaryIp);
    eni.status = 'InUse';
    eni.instanceId = id;
    return inst;
  }

  /** The next `times` calls of `action` fail with this error. */
  inject(action: string, f: Fault): void {
    this.faults.set(action, [...(this.faults.get(action) ?? []), { times: 1, ...f }]);
  }

  /** At most `count` calls of `action` per window (a second unless said: the published limits are per minute); the rest get Throttling. */
  rateLimit(action: string, count: number, windowMs = 1000): void {
    this.limits.set(action, { count, windowMs, stamps: [] });
  }

  clearRateLimits(): void {
    this.limits.clear();
  }

  setLatency(latency: number | Record<string, number>): void {
    this.opts.latencyMs = latency;
  }

  setVisibleAfter(ms: number): void {
    this.opts.visibleAfterMs = ms;
  }

  /** What the control API's GET /_emulator/state answers. */
  state(): unknown {
    return {
      regionId: this.regionId,
      instances: [...this.instances.values()],
      vswitches: [...this.vswitches.values()].map((v) => ({ id: v.id, vpcId: v.vpcId, zoneId: v.zoneId, cidr: v.cidr, used: v.used.size })),
      enis: [...this.enis.values()],
      rateLimits: Object.fromEntries([...this.limits].map(([a, l]) => [a, { count: l.count, windowMs: l.windowMs }])),
      latencyMs: this.opts.latencyMs ?? 0,
      visibleAfterMs: this.opts.visibleAfterMs ?? 0,
      calls: this.calls.length,
    };
  }

  count(action: string): number {
    return this.calls.filter((c) => c.action === action).length;
  }

  // ---- server ----

  async listen(port = 0, host = '127.0.0.1'): Promise<string> {
    this.server = http.createServer((req, res) => this.handle(req, res));
    await new Promise<void>((r) => this.server!.listen(port, host, r));
    return this.endpoint;
  }

  /**
   * Binds at once, on every address, in the calling thread's network
   * namespace: wrapped in netlib's runInNetns it serves a test namespace.
   */
  listenSync(port = 0): string {
    this.server = http.createServer((req, res) => this.handle(req, res));
    this.server.listen(port);
    return this.endpoint;
  }

  /** Where a client reaches it: the address it listens on, or loopback when that is every address. */
  get endpoint(): string {
    const a = this.server!.address() as AddressInfo;
    const host = a.address === '0.0.0.0' || a.address === '::' ? '127.0.0.1' : a.family === 'IPv6' ? `[${a.address}]` : a.address;
    return `${host}:${a.port}`;
  }

  async close(): Promise<void> {
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    if (!this.server) return;
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server!.close(() => r()));
    this.server = undefined;
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => this.serve(req, res, Buffer.concat(chunks)));
  }

  /** One request: the metadata service, or an API call answered after the action's latency. */
  private serve(req: http.IncomingMessage, res: http.ServerResponse, body: Buffer): void {
    const { send, fail } = responder(res);
    try {
      const url = new URL(req.url ?? '/', 'http://fake');
      if (req.method === 'GET' && url.pathname.startsWith('/latest/meta-data/')) {
        const v = this.metadata(url.pathname.slice('/latest/meta-data/'.length), req.socket.remoteAddress ?? '');
        res.writeHead(v === undefined ? 404 : 200, { 'content-type': 'text/plain' });
        res.end(v ?? 'Not Found');
        return;
      }
      if (url.pathname.startsWith('/_emulator/')) return void send(...this.control(req.method ?? 'GET', url.pathname, body));
      const { action, version, params } = this.readCall(req, url, body);
      this.calls.push({ action, params });
      const run = (): void => {
        try {
          this.checkFaults(action);
          send(200, this.dispatch(version, action, params));
        } catch (e) {
          fail(e);
        }
      };
      const lat = typeof this.opts.latencyMs === 'number' ? this.opts.latencyMs : (this.opts.latencyMs?.[action] ?? 0);
      if (lat > 0) this.later(lat, run);
      else run();
    } catch (e) {
      fail(e);
    }
  }

  /** Action, version and parameters (query string, then a form body), the V3 signature checked when there is one. */
  private readCall(req: http.IncomingMessage, url: URL, body: Buffer): { action: string; version: string; params: Params } {
    const params: Params = {};
    for (const [k, v] of url.searchParams) params[k] = v;
    const ctype = String(req.headers['content-type'] ?? '');
    if (body.length && ctype.includes('x-www-form-urlencoded')) for (const [k, v] of new URLSearchParams(body.toString())) params[k] = v;
    const action = String(req.headers['x-acs-action'] ?? params['Action'] ?? '');
    const version = String(req.headers['x-acs-version'] ?? params['Version'] ?? '');
    if (req.headers['authorization']) this.verifyV3(req, url, body);
    if (!action) throw missing('Action');
    if (version !== ECS_VERSION && version !== VPC_VERSION)
      throw new ApiError(400, 'InvalidVersion', `Specified parameter Version is not valid: ${version}`);
    return { action, version, params };
  }

  private later(ms: number, fn: () => void): void {
    const t = setTimeout(() => {
      this.timers.delete(t);
      fn();
    }, ms);
    this.timers.add(t);
  }

  private verifyV3(req: http.IncomingMessage, url: URL, body: Buffer): void {
    const auth = String(req.headers['authorization']);
    const m = /^ACS3-HMAC-SHA256 Credential=([^,]+),SignedHeaders=([^,]+),Signature=([0-9a-f]+)$/.exec(auth);
    if (!m) throw new ApiError(400, 'IncompleteSignature', 'The request signature does not conform to Aliyun standards.');
    const [, akId, signed, sig] = m;
    // Every common request header the request carries (Authorization aside) must be signed.
    const names = signed!.split(';');
    const unsigned = Object.keys(req.headers).filter((h) => (h === 'host' || h.startsWith('x-acs-')) && !names.includes(h));
    if (unsigned.length)
      throw new ApiError(
        400,
        'IncompleteSignature',
        `The request signature does not conform to Aliyun standards: ${unsigned.join(', ')} not signed.`,
      );
    const secret = this.accessKeys[akId!];
    if (secret === undefined) throw new ApiError(404, 'InvalidAccessKeyId.NotFound', 'Specified access key is not found.');
    const payload = createHash('sha256').update(body).digest('hex');
    if (req.headers['x-acs-content-sha256'] !== payload)
      throw new ApiError(400, 'SignatureDoesNotMatch', 'The request body hash does not match x-acs-content-sha256.');
    const keys = [...url.searchParams.keys()].sort();
    const query = keys.map((k) => `${acsEncode(k)}=${acsEncode(url.searchParams.get(k) ?? '')}`).join('&');
    const headers = names.map((h) => `${h}:${String(req.headers[h] ?? '').trim()}\n`).join('');
    const canonical = `${req.method}\n${url.pathname}\n${query}\n${headers}\n${signed}\n${payload}`;
    const toSign = `ACS3-HMAC-SHA256\n${createHash('sha256').update(canonical).digest('hex')}`;
    const want = createHmac('sha256', secret).update(toSign).digest('hex');
    if (want !== sig) throw new ApiError(400, 'SignatureDoesNotMatch', 'Specified signature is not matched with our calculation.');
  }

  private checkFaults(action: string): void {
    const lim = this.limits.get(action);
    if (lim) {
      // Sliding window.
      const now = Date.now();
      lim.stamps = lim.stamps.filter((t) => now - t < lim.windowMs);
      if (lim.stamps.length >= lim.count) throw new ApiError(400, 'Throttling', 'Request was denied due to request throttling.');
      lim.stamps.push(now);
    }
    const list = this.faults.get(action);
    const f = list?.[0];
    if (f) {
      f.times = (f.times ?? 1) - 1;
      if (f.times <= 0) list!.shift();
      throw new ApiError(f.status, f.code, f.message ?? `injected failure: ${f.code}`);
    }
  }

  /** The control API: how a program outside does what the tests do in-process. Answers [status, body]. */
  private control(method: string, p: string, raw: Buffer): [number, Record<string, unknown>] {
    const body = (raw.length ? JSON.parse(raw.toString()) : {}) as Record<string, unknown>;
    const str = (k: string): string => String(body[k] ?? '');
    if (method === 'GET' && p === '/_emulator/state') return [200, this.state() as Record<string, unknown>];
    if (method === 'POST' && p === '/_emulator/vswitches') {
      if (!str('id') || !str('zoneId') || !str('cidr')) return [400, { error: 'id, zoneId and cidr are required' }];
      this.addVSwitch(str('id'), str('zoneId'), str('cidr'), str('vpcId') || undefined, str('ipv6Cidr') || undefined);
      return [200, {}];
    }
    if (method === 'POST' && p === '/_emulator/instances') {
      if (!str('id') || !this.instanceTypes.has(str('type')) || !this.vswitches.has(str('vswitchId')))
        return [400, { error: 'id, a known type and a known vswitchId are required' }];
      return [200, { ...this.addInstance(str('id'), str('type'), str('vswitchId'), str('primaryIp') || undefined) }];
    }
    if (method === 'POST' && p === '/_emulator/inject') {
      const status = Number(body.status);
      if (!str('action') || !str('code') || !(status >= 400)) return [400, { error: 'action, code and status >= 400 are required' }];
      this.inject(str('action'), { code: str('code'), status, message: str('message') || undefined, times: Number(body.times ?? 1) });
      return [200, {}];
    }
    if (method === 'PUT' && p === '/_emulator/config') {
      if (typeof body.latencyMs === 'number' || (typeof body.latencyMs === 'object' && body.latencyMs))
        this.setLatency(body.latencyMs as number);
      if (typeof body.visibleAfterMs === 'number') this.setVisibleAfter(body.visibleAfterMs);
      if (body.rateLimits === null) this.clearRateLimits();
      else if (typeof body.rateLimits === 'object' && body.rateLimits)
        for (const [action, l] of Object.entries(body.rateLimits as Record<string, { count: number; windowMs?: number }>))
          this.rateLimit(action, l.count, l.windowMs);
      return [200, this.state() as Record<string, unknown>];
    }
    return [404, { error: `aliyun emulator: no control route ${method} ${p}` }];
  }

  /** The IPv6 gateway of a vSwitch (the fake's choice: the first address of its IPv6 CIDR, `<prefix>::1`). */
  static gateway6Of(ipv6Cidr: string): string {
    return ip.nthAddress(ipv6Cidr, 1);
  }

  /**
   * The instance metadata service (100.100.100.200): as each VM's own, for the instance whose primary IP the
   * caller has; for any other caller, the first instance added.
   */
  private metadata(p: string, caller: string): string | undefined {
    const from = caller.replace(/^::ffff:/, '');
    const own = [...this.enis.values()].find((e) => e.type === 'Primary' && e.primaryIp === from)?.instanceId;
    const inst = (own ? this.instances.get(own) : undefined) ?? [...this.instances.values()][0];
    if (!inst) return undefined;
    const gw6 = /^network\/interfaces\/macs\/([0-9a-f:]+)\/ipv6-gateway\/?$/.exec(p);
    if (gw6) {
      const e = [...this.enis.values()].find((x) => x.mac === gw6[1] && x.instanceId === inst.id);
      const c = e ? this.vswitches.get(e.vswitchId)?.ipv6Cidr : undefined;
      return c ? FakeOpenApi.gateway6Of(c) : undefined;
    }
    const primary = [...this.enis.values()].find((e) => e.instanceId === inst.id && e.type === 'Primary');
    const table: Record<string, string | undefined> = {
      'instance-id': inst.id,
      'region-id': this.regionId,
      'zone-id': inst.zoneId,
      'instance/instance-type': inst.type,
      'vswitch-id': inst.vswitchId,
      'vpc-id': this.vswitches.get(inst.vswitchId)?.vpcId,
      mac: primary?.mac,
      'private-ipv4': primary?.primaryIp,
    };
    return table[p.replace(/\/$/, '')];
  }

  // ---- helpers ----

  private need(p: Params, name: string): string {
    const v = p[name];
    if (v === undefined || v === '') throw missing(name);
    return v;
  }

  private region(p: Params): void {
    const r = this.need(p, 'RegionId');
    if (r !== this.regionId) throw new ApiError(400, 'InvalidRegionId.NotFound', `The specified RegionId does not exist: ${r}`);
  }

  private int(p: Params, name: string, def: number, min: number, max: number): number {
    const v = p[name];
    if (v === undefined || v === '') return def;
    const n = Number(v);
    if (!Number.isInteger(n) || n < min || n > max)
      throw new ApiError(
        400,
        `InvalidParameter.${name}`,
        `The specified parameter "${name}" is not valid: ${v}; expected an integer in [${min}, ${max}].`,
      );
    return n;
  }

  /** `Name.1`, `Name.2`, ... (flat RPC lists); also accepts a JSON array in `Name`. */
  private list(p: Params, name: string): string[] {
    const out: string[] = [];
    for (let i = 1; p[`${name}.${i}`] !== undefined; i++) out.push(p[`${name}.${i}`]!);
    if (out.length === 0 && p[name] !== undefined) {
      try {
        const j = JSON.parse(p[name]!) as unknown;
        if (Array.isArray(j)) return j.map(String);
      } catch {
        return [p[name]!];
      }
    }
    return out;
  }

  private vsw(id: string): FakeVSwitch {
    const v = this.vswitches.get(id);
    if (!v) throw new ApiError(404, 'InvalidVSwitchId.NotFound', `The specified VSwitchId does not exist: ${id}`);
    return v;
  }

  private eni(id: string): FakeEni {
    const e = this.enis.get(id);
    if (!e || e.status === 'Deleting')
      throw new ApiError(404, 'InvalidEniId.NotFound', `The specified NetworkInterfaceId does not exist: ${id}`);
    return e;
  }

  /** The ENI a call names in NetworkInterfaceId, in this region. */
  private targetEni(p: Params): FakeEni {
    this.region(p);
    return this.eni(this.need(p, 'NetworkInterfaceId'));
  }

  private instance(id: string): FakeInstance {
    const i = this.instances.get(id);
    if (!i) throw new ApiError(404, 'InvalidEcsId.NotFound', `The specified InstanceId does not exist: ${id}`);
    return i;
  }

  /** Alibaba keeps the first address and the last three of a vSwitch; the gateway is last - 2. */
  static gatewayOf(cidr: string): string {
    return ip.offsetIp(ip.broadcast(cidr), -2);
  }

  private freeCount(v: FakeVSwitch): number {
    return Math.max(0, Number(ip.size(v.cidr)) - 4 - v.used.size);
  }

  private takeIps(v: FakeVSwitch, n: number): string[] {
    if (this.freeCount(v) < n)
      throw new ApiError(403, 'InvalidVSwitchId.IpNotEnough', `The specified VSwitch "${v.id}" has not enough IpAddress.`);
    const out: string[] = [];
    const size = Number(ip.size(v.cidr));
    for (let i = 1; i < size - 3 && out.length < n; i++) {
      const a = ip.nthAddress(v.cidr, i);
      if (!v.used.has(a)) {
        v.used.add(a);
        out.push(a);
      }
    }
    return out;
  }

  /** IPv6 addresses of the vSwitch's /64, from ::100 up (below is left to the gateway and the fake's reserve). */
  private takeIpv6s(v: FakeVSwitch, n: number): string[] {
    if (!v.ipv6Cidr) throw ipv6NotOn(v);
    const out: string[] = [];
    for (let i = 0x100; out.length < n; i++) {
      const a = ip.nthAddress(v.ipv6Cidr, i);
      if (!v.used6.has(a)) {
        v.used6.add(a);
        out.push(a);
      }
    }
    return out;
  }

  private ipv6Quota(e: FakeEni): number | undefined {
    const inst = e.instanceId ? this.instances.get(e.instanceId) : undefined;
    const t = inst ? this.instanceTypes.get(inst.type) : undefined;
    return t ? (t.eniIpv6AddressQuantity ?? 0) : undefined;
  }

  private newEni(v: FakeVSwitch, sgs: string[], secondary: number, type: EniType = 'Secondary', primaryIp?: string): FakeEni {
    const ips = primaryIp ? [...takeExplicitIps(v, [primaryIp]), ...this.takeIps(v, secondary)] : this.takeIps(v, secondary + 1);
    const n = ++this.seq;
    const eni: FakeEni = {
      id: `eni-${this.regionId.slice(3, 5)}${n.toString(36).padStart(18, '0')}`,
      type,
      status: 'Available',
      vswitchId: v.id,
      securityGroupIds: sgs,
      mac: `00:16:3e:${((n >> 16) & 255).toString(16).padStart(2, '0')}:${((n >> 8) & 255).toString(16).padStart(2, '0')}:${(n & 255).toString(16).padStart(2, '0')}`,
      primaryIp: ips[0]!,
      secondaryIps: ips.slice(1),
      ipv6s: [],
      creationTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
      ...(this.opts.visibleAfterMs ? { visibleAt: Date.now() + this.opts.visibleAfterMs } : {}),
    };
    this.enis.set(eni.id, eni);
    this.addressesChanged(eni, ips, []);
    return eni;
  }

  private addressesChanged(eni: FakeEni, added: string[], removed: string[]): void {
    if (eni.type !== 'Primary' && (added.length || removed.length)) this.opts.onAddresses?.({ eni, added, removed });
  }

  private ipSets(e: FakeEni): Record<string, unknown> {
    return {
      PrivateIpSet: [
        { PrivateIpAddress: e.primaryIp, Primary: true },
        ...e.secondaryIps.map((a) => ({ PrivateIpAddress: a, Primary: false })),
      ],
    };
  }

  private eniView(e: FakeEni): Record<string, unknown> {
    const v = this.vswitches.get(e.vswitchId)!;
    return {
      NetworkInterfaceId: e.id,
      NetworkInterfaceName: '',
      Status: e.status,
      Type: e.trunkEniId ? 'Member' : e.type,
      VpcId: v.vpcId,
      VSwitchId: e.vswitchId,
      ZoneId: v.zoneId,
      InstanceId: e.instanceId ?? '',
      MacAddress: e.mac,
      PrivateIpAddress: e.primaryIp,
      PrivateIpSets: this.ipSets(e),
      Ipv6Sets: { Ipv6Set: e.ipv6s.map((a) => ({ Ipv6Address: a })) },
      SecurityGroupIds: { SecurityGroupId: e.securityGroupIds },
      Description: e.description ?? '',
      CreationTime: e.creationTime,
      Attachment: e.instanceId
        ? { InstanceId: e.instanceId, DeviceIndex: e.deviceIndex ?? 0, ...(e.trunkEniId ? { TrunkNetworkInterfaceId: e.trunkEniId } : {}) }
        : {},
    };
  }

  /** The ENIs an instance holds in its EniQuantity slots (members of its trunk are counted apart). */
  private enisOn(instanceId: string): FakeEni[] {
    return [...this.enis.values()].filter((e) => e.instanceId === instanceId && e.status !== 'Deleting' && !e.trunkEniId);
  }

  private membersOf(trunkId: string): FakeEni[] {
    return [...this.enis.values()].filter((e) => e.trunkEniId === trunkId && e.status !== 'Deleting');
  }

  // ---- ECS ----

  /** One handler per action, so an action's checks read top to bottom; an action missing here is InvalidAction.NotFound. */
  private readonly ecsActions = new Map<string, ActionHandler>([
    ['CreateNetworkInterface', (p) => this.createNetworkInterface(p)],
    ['AttachNetworkInterface', (p) => this.attachNetworkInterface(p)],
    ['DetachNetworkInterface', (p) => this.detachNetworkInterface(p)],
    ['DeleteNetworkInterface', (p) => this.deleteNetworkInterface(p)],
    ['AssignPrivateIpAddresses', (p) => this.assignPrivateIpAddresses(p)],
    ['UnassignPrivateIpAddresses', (p) => this.unassignPrivateIpAddresses(p)],
    ['AssignIpv6Addresses', (p) => this.assignIpv6Addresses(p)],
    ['UnassignIpv6Addresses', (p) => this.unassignIpv6Addresses(p)],
    ['DescribeNetworkInterfaces', (p) => this.describeNetworkInterfaces(p)],
    ['DescribeInstanceTypes', (p) => this.describeInstanceTypes(p)],
    ['DescribeInstances', (p) => this.describeInstances(p)],
  ]);

  private readonly vpcActions = new Map<string, ActionHandler>([['DescribeVSwitches', (p) => this.describeVSwitches(p)]]);

  private dispatch(version: string, action: string, p: Params): Record<string, unknown> {
    const handler = (version === ECS_VERSION ? this.ecsActions : this.vpcActions).get(action);
    if (!handler)
      throw new ApiError(404, 'InvalidAction.NotFound', `Specified api is not found, please check your url and method: ${action}`);
    return handler(p);
  }

  private createNetworkInterface(p: Params): Record<string, unknown> {
    this.region(p);
    const v = this.vsw(this.need(p, 'VSwitchId'));
    const sgs = [...this.list(p, 'SecurityGroupIds'), ...(p['SecurityGroupId'] ? [p['SecurityGroupId']] : [])];
    if (sgs.length === 0) throw missing('SecurityGroupId');
    const n = this.int(p, 'SecondaryPrivateIpAddressCount', 0, 0, MAX_SECONDARY_ON_CREATE);
    // InstanceType: Secondary (default) or Trunk.
    const kind = p['InstanceType'] ?? 'Secondary';
    if (kind !== 'Secondary' && kind !== 'Trunk')
      throw new ApiError(
        400,
        'InvalidParameter.InstanceType',
        `The specified parameter "InstanceType" is not valid: ${kind}; expected Secondary or Trunk.`,
      );
    const n6 = this.int(p, 'Ipv6AddressCount', 0, 0, 10);
    if (n6 > 0 && !v.ipv6Cidr) throw ipv6NotOn(v);
    const e = this.newEni(v, sgs, n, kind);
    if (n6 > 0) e.ipv6s.push(...this.takeIpv6s(v, n6));
    if (p['Description']) e.description = p['Description'];
    return {
      NetworkInterfaceId: e.id,
      Status: e.status,
      Type: e.type,
      VpcId: v.vpcId,
      VSwitchId: v.id,
      ZoneId: v.zoneId,
      MacAddress: e.mac,
      PrivateIpAddress: e.primaryIp,
      PrivateIpSets: this.ipSets(e),
      SecurityGroupIds: { SecurityGroupId: sgs },
    };
  }

  private attachNetworkInterface(p: Params): Record<string, unknown> {
    const e = this.targetEni(p);
    const inst = this.instance(this.need(p, 'InstanceId'));
    requireEniState(e, 'Available');
    const t = this.instanceTypes.get(inst.type);
    const trunkId = p['TrunkNetworkInstanceId'];
    if (e.type === 'Trunk' && t && !t.eniTrunkSupported)
      throw new ApiError(
        403,
        'InvalidOperation.InstanceTypeNotSupportTrunk',
        `The instance type ${inst.type} does not support trunk ENIs.`,
      );
    if (trunkId) this.joinTrunk(e, inst, t, trunkId);
    else e.deviceIndex = this.freeDeviceIndex(inst, t);
    if (t && 1 + e.secondaryIps.length > t.eniPrivateIpAddressQuantity)
      throw new ApiError(403, 'InvalidOperation.Ipv4CountExceeded', `The ENI holds more private IPs than ${inst.type} allows per ENI.`);
    if (t && e.ipv6s.length > (t.eniIpv6AddressQuantity ?? 0))
      throw new ApiError(403, 'InvalidOperation.Ipv6CountExceeded', `The ENI holds more IPv6 addresses than ${inst.type} allows per ENI.`);
    if (this.vsw(e.vswitchId).zoneId !== inst.zoneId)
      throw new ApiError(403, 'InvalidVSwitchId.ZoneMismatch', 'The ENI and the instance are in different zones.');
    e.status = 'Attaching';
    e.instanceId = inst.id;
    this.later(this.opts.attachDelayMs ?? 30, () => {
      if (e.status !== 'Attaching') return;
      const inUse = (): void => {
        if (e.status === 'Attaching') e.status = 'InUse';
      };
      // The NIC is plugged (hook) before the API reports InUse, as on a real instance.
      void Promise.resolve(this.opts.onAttached?.(e)).then(inUse, inUse);
    });
    return {};
  }

  /** A member ENI: through the instance's InUse trunk ENI, counted against EniTotalQuantity - EniQuantity. */
  private joinTrunk(e: FakeEni, inst: FakeInstance, t: FakeInstanceType | undefined, trunkId: string): void {
    const trunk = this.eni(trunkId);
    if (trunk.type !== 'Trunk' || trunk.instanceId !== inst.id || trunk.status !== 'InUse')
      throw new ApiError(403, 'InvalidOperation.InvalidTrunkEniState', `The ENI ${trunkId} is not an InUse trunk ENI of ${inst.id}.`);
    if (e.type !== 'Secondary')
      throw new ApiError(403, 'InvalidOperation.InvalidEniType', `Only a Secondary ENI can be a trunk member: ${e.id} is ${e.type}.`);
    const room = t ? (t.eniTotalQuantity ?? t.eniQuantity) - t.eniQuantity : 0;
    if (this.membersOf(trunkId).length >= room)
      throw new ApiError(
        403,
        'EniPerInstanceLimitExceeded',
        `The number of member ENIs of the trunk ${trunkId} exceeds the limit of ${room} for ${inst.type}.`,
      );
    e.trunkEniId = trunkId;
    e.deviceIndex = 0;
  }

  /** The lowest device index from 1 not taken on the instance, when one of its EniQuantity slots is free. */
  private freeDeviceIndex(inst: FakeInstance, t: FakeInstanceType | undefined): number {
    if (t && this.enisOn(inst.id).length >= t.eniQuantity)
      throw new ApiError(
        403,
        'EniPerInstanceLimitExceeded',
        `The number of ENIs attached to the instance exceeds the limit of ${t.eniQuantity} for ${inst.type}.`,
      );
    const taken = new Set(this.enisOn(inst.id).map((x) => x.deviceIndex));
    let idx = 1;
    while (taken.has(idx)) idx++;
    return idx;
  }

  private detachNetworkInterface(p: Params): Record<string, unknown> {
    const e = this.targetEni(p);
    const instId = this.need(p, 'InstanceId');
    this.instance(instId);
    if (e.type === 'Primary') throw new ApiError(403, 'InvalidOperation.DetachPrimaryEniNotAllowed', 'The primary ENI cannot be detached.');
    if (e.instanceId !== instId) throw invalidEniState(e);
    requireEniState(e, 'InUse');
    if (e.type === 'Trunk' && this.membersOf(e.id).length > 0)
      throw new ApiError(403, 'InvalidOperation.TrunkEniHasMembers', `The trunk ENI ${e.id} still has member ENIs.`);
    e.status = 'Detaching';
    this.later(this.opts.attachDelayMs ?? 30, () => {
      if (e.status !== 'Detaching') return;
      e.status = 'Available';
      delete e.instanceId;
      delete e.trunkEniId;
      delete e.deviceIndex;
      void this.opts.onDetached?.(e);
    });
    return {};
  }

  private deleteNetworkInterface(p: Params): Record<string, unknown> {
    const e = this.targetEni(p);
    requireEniState(e, 'Available');
    const v = this.vswitches.get(e.vswitchId)!;
    for (const a of [e.primaryIp, ...e.secondaryIps]) v.used.delete(a);
    for (const a of e.ipv6s) v.used6.delete(a);
    this.enis.delete(e.id);
    this.addressesChanged(e, [], [e.primaryIp, ...e.secondaryIps]);
    return {};
  }

  private assignPrivateIpAddresses(p: Params): Record<string, unknown> {
    const e = this.targetEni(p);
    requireEniState(e, 'InUse', 'Available');
    const explicit = this.list(p, 'PrivateIpAddress');
    const n = explicit.length || this.int(p, 'SecondaryPrivateIpAddressCount', 0, 1, MAX_ASSIGN_PER_CALL);
    if (n === 0)
      throw new ApiError(400, 'MissingParameter', 'Either "PrivateIpAddress.N" or "SecondaryPrivateIpAddressCount" must be supplied.');
    const inst = e.instanceId ? this.instances.get(e.instanceId) : undefined;
    const t = inst ? this.instanceTypes.get(inst.type) : undefined;
    if (t && 1 + e.secondaryIps.length + n > t.eniPrivateIpAddressQuantity)
      throw new ApiError(
        403,
        'InvalidOperation.Ipv4CountExceeded',
        `The ENI ${e.id} would hold more than ${t.eniPrivateIpAddressQuantity} private IPs (${inst!.type}).`,
      );
    const v = this.vswitches.get(e.vswitchId)!;
    const ips = explicit.length ? takeExplicitIps(v, explicit) : this.takeIps(v, n);
    e.secondaryIps.push(...ips);
    this.addressesChanged(e, ips, []);
    return { AssignedPrivateIpAddressesSet: { NetworkInterfaceId: e.id, PrivateIpSet: { PrivateIpAddress: ips } } };
  }

  private unassignPrivateIpAddresses(p: Params): Record<string, unknown> {
    const e = this.targetEni(p);
    const ips = this.list(p, 'PrivateIpAddress');
    if (ips.length === 0) throw missing('PrivateIpAddress.N');
    for (const a of ips) {
      if (a === e.primaryIp)
        throw new ApiError(403, 'InvalidOperation.PrimaryIpCannotBeUnassigned', `The primary IP ${a} of ${e.id} cannot be unassigned.`);
      if (!e.secondaryIps.includes(a))
        throw new ApiError(404, 'InvalidPrivateIpAddress.NotFound', `The IP ${a} is not assigned to ${e.id}.`);
    }
    const v = this.vswitches.get(e.vswitchId)!;
    e.secondaryIps = e.secondaryIps.filter((a) => !ips.includes(a));
    for (const a of ips) v.used.delete(a);
    this.addressesChanged(e, [], ips);
    return {};
  }

  private assignIpv6Addresses(p: Params): Record<string, unknown> {
    const e = this.targetEni(p);
    requireEniState(e, 'InUse', 'Available');
    const v = this.vswitches.get(e.vswitchId)!;
    if (!v.ipv6Cidr) throw ipv6NotOn(v);
    const explicit = this.list(p, 'Ipv6Address');
    const n = explicit.length || this.int(p, 'Ipv6AddressCount', 0, 1, MAX_ASSIGN_PER_CALL);
    if (n === 0) throw new ApiError(400, 'MissingParameter', 'Either "Ipv6Address.N" or "Ipv6AddressCount" must be supplied.');
    const quota = this.ipv6Quota(e);
    if (quota !== undefined && e.ipv6s.length + n > quota)
      throw new ApiError(403, 'InvalidOperation.Ipv6CountExceeded', `The ENI ${e.id} would hold more than ${quota} IPv6 addresses.`);
    const ips = explicit.length ? takeExplicitIpv6s(v, v.ipv6Cidr, explicit) : this.takeIpv6s(v, n);
    e.ipv6s.push(...ips);
    return { NetworkInterfaceId: e.id, Ipv6Sets: { Ipv6Address: ips } };
  }

  private unassignIpv6Addresses(p: Params): Record<string, unknown> {
    const e = this.targetEni(p);
    const ips = this.list(p, 'Ipv6Address').map((a) => ip.canonicalIp(a));
    if (ips.length === 0) throw missing('Ipv6Address.N');
    for (const a of ips)
      if (!e.ipv6s.includes(a)) throw new ApiError(404, 'InvalidIpv6Address.NotFound', `The IPv6 address ${a} is not assigned to ${e.id}.`);
    const v = this.vswitches.get(e.vswitchId)!;
    e.ipv6s = e.ipv6s.filter((a) => !ips.includes(a));
    for (const a of ips) v.used6.delete(a);
    return {};
  }

  private describeNetworkInterfaces(p: Params): Record<string, unknown> {
    this.region(p);
    const ids = this.list(p, 'NetworkInterfaceId');
    const max = this.int(p, 'MaxResults', 10, 10, 500);
    const now = Date.now();
    let all = [...this.enis.values()].filter((e) => e.status !== 'Deleting' && (e.visibleAt ?? 0) <= now);
    if (ids.length) all = all.filter((e) => ids.includes(e.id));
    if (p['InstanceId']) all = all.filter((e) => e.instanceId === p['InstanceId']);
    if (p['VSwitchId']) all = all.filter((e) => e.vswitchId === p['VSwitchId']);
    if (p['Status']) all = all.filter((e) => e.status === p['Status']);
    if (p['Type']) all = all.filter((e) => (e.trunkEniId ? 'Member' : e.type) === p['Type']);
    all.sort((a, b) => a.id.localeCompare(b.id));
    // NextToken: the last ENI id of the previous page (base64url); the page starts after it.
    let start = 0;
    if (p['NextToken']) {
      const tok = Buffer.from(p['NextToken'], 'base64url').toString();
      start = all.findIndex((e) => e.id > tok);
      if (!/^eni-/.test(tok)) throw new ApiError(400, 'InvalidParameter.NextToken', 'The specified NextToken is not valid.');
      if (start < 0) start = all.length;
    }
    const page = all.slice(start, start + max);
    const more = start + max < all.length;
    return {
      NetworkInterfaceSets: { NetworkInterfaceSet: page.map((e) => this.eniView(e)) },
      NextToken: more ? Buffer.from(page[page.length - 1]!.id).toString('base64url') : '',
      TotalCount: all.length,
    };
  }

  private describeInstanceTypes(p: Params): Record<string, unknown> {
    const names = this.list(p, 'InstanceTypes');
    const all = [...this.instanceTypes].filter(([n]) => names.length === 0 || names.includes(n));
    return {
      InstanceTypes: {
        InstanceType: all.map(([n, t]) => ({
          InstanceTypeId: n,
          EniQuantity: t.eniQuantity,
          EniPrivateIpAddressQuantity: t.eniPrivateIpAddressQuantity,
          EniIpv6AddressQuantity: t.eniIpv6AddressQuantity ?? 0,
          EniTotalQuantity: t.eniTotalQuantity ?? t.eniQuantity,
          EniTrunkSupported: t.eniTrunkSupported ?? false,
        })),
      },
      NextToken: '',
    };
  }

  private describeInstances(p: Params): Record<string, unknown> {
    this.region(p);
    const ids = this.list(p, 'InstanceIds');
    const all = [...this.instances.values()].filter((i) => ids.length === 0 || ids.includes(i.id));
    return {
      Instances: {
        Instance: all.map((i) => ({
          InstanceId: i.id,
          InstanceType: i.type,
          ZoneId: i.zoneId,
          RegionId: this.regionId,
          Status: 'Running',
          VpcAttributes: { VSwitchId: i.vswitchId, VpcId: this.vswitches.get(i.vswitchId)?.vpcId ?? '' },
        })),
      },
      TotalCount: all.length,
      NextToken: '',
    };
  }

  // ---- VPC ----

  private describeVSwitches(p: Params): Record<string, unknown> {
    this.region(p);
    const pageNumber = this.int(p, 'PageNumber', 1, 1, 1_000_000);
    const pageSize = this.int(p, 'PageSize', 10, 1, 50);
    const ids = (p['VSwitchId'] ?? '').split(',').filter(Boolean);
    let all = [...this.vswitches.values()];
    if (ids.length) all = all.filter((v) => ids.includes(v.id));
    if (p['ZoneId']) all = all.filter((v) => v.zoneId === p['ZoneId']);
    if (p['VpcId']) all = all.filter((v) => v.vpcId === p['VpcId']);
    const page = all.slice((pageNumber - 1) * pageSize, pageNumber * pageSize);
    return {
      VSwitches: {
        VSwitch: page.map((v) => ({
          VSwitchId: v.id,
          VpcId: v.vpcId,
          ZoneId: v.zoneId,
          CidrBlock: v.cidr,
          ...(v.ipv6Cidr ? { Ipv6CidrBlock: v.ipv6Cidr } : {}),
          AvailableIpAddressCount: this.freeCount(v),
          Status: 'Available',
          IsDefault: false,
        })),
      },
      TotalCount: all.length,
      PageNumber: pageNumber,
      PageSize: pageSize,
    };
  }
}

function missing(name: string): ApiError {
  return new ApiError(
    400,
    'MissingParameter',
    `The input parameter "${name}" that is mandatory for processing this request is not supplied.`,
  );
}

function ipv6NotOn(v: FakeVSwitch): ApiError {
  return new ApiError(403, 'InvalidVSwitch.Ipv6NotTurnOn', `The specified VSwitch "${v.id}" has no IPv6 CIDR block.`);
}

function invalidEniState(e: FakeEni): ApiError {
  return new ApiError(
    403,
    'InvalidOperation.InvalidEniState',
    `The current status of the ENI ${e.id} does not support this operation: ${e.status}`,
  );
}

function requireEniState(e: FakeEni, ...allowed: EniStatus[]): void {
  if (!allowed.includes(e.status)) throw invalidEniState(e);
}

/** PrivateIpAddress.N: each in the vSwitch's CIDR and free, all checked before any is taken. */
function takeExplicitIps(v: FakeVSwitch, explicit: string[]): string[] {
  for (const a of explicit) {
    if (!ip.contains(v.cidr, a))
      throw new ApiError(400, 'InvalidPrivateIpAddress.Malformed', `The IP ${a} is not in the vSwitch CIDR ${v.cidr}.`);
    if (v.used.has(a)) throw new ApiError(400, 'InvalidIp.IpAssigned', `The IP ${a} is already assigned.`);
  }
  for (const a of explicit) v.used.add(a);
  return explicit;
}

/** Ipv6Address.N: each in the vSwitch's IPv6 CIDR and free, all checked before any is taken; kept in canonical form. */
function takeExplicitIpv6s(v: FakeVSwitch, ipv6Cidr: string, explicit: string[]): string[] {
  for (const a of explicit) {
    if (!ip.contains(ipv6Cidr, a))
      throw new ApiError(400, 'InvalidIpv6Address.Malformed', `The IPv6 address ${a} is not in the vSwitch IPv6 CIDR ${ipv6Cidr}.`);
    if (v.used6.has(ip.canonicalIp(a))) throw new ApiError(400, 'InvalidIp.IpAssigned', `The IPv6 address ${a} is already assigned.`);
  }
  const ips = explicit.map((a) => ip.canonicalIp(a));
  for (const a of ips) v.used6.add(a);
  return ips;
}

/** JSON answers carrying one request id; errors in the API's shape, anything unexpected as 500 InternalError. */
function responder(res: http.ServerResponse): {
  send: (status: number, obj: Record<string, unknown>) => void;
  fail: (e: unknown) => void;
} {
  const requestId = randomBytes(16)
    .toString('hex')
    .toUpperCase()
    .replace(/^(.{8})(.{4})(.{4})(.{4})/, '$1-$2-$3-$4-');
  const send = (status: number, obj: Record<string, unknown>): void => {
    const text = JSON.stringify({ RequestId: requestId, ...obj });
    res.writeHead(status, { 'content-type': 'application/json;charset=utf-8', 'x-acs-request-id': requestId });
    res.end(text);
  };
  const fail = (e: unknown): void => {
    const err =
      e instanceof ApiError
        ? e
        : new ApiError(
            500,
            'InternalError',
            `The request processing has failed due to some unknown error. ${e instanceof Error ? e.message : ''}`,
          );
    send(err.status, {
      HostId: 'ecs.aliyuncs.com',
      Code: err.code,
      Message: err.message,
      Recommend: `https://api.aliyun.com/troubleshoot?q=${err.code}&product=Ecs`,
    });
  };
  return { send, fail };
}
