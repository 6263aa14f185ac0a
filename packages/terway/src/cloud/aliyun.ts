/**
 * The pool's cloud: ECS (2014-05-26) and VPC (2016-04-28) through our own
 * OpenAPI client (./openapi.ts: RPC style, V3 ACS3-HMAC-SHA256 signatures, in
 * place of the official SDK and its ~110 MiB), endpoint overridable (tests
 * point it at the emulator). Waits for the async ENI states itself; retries
 * Throttling and 5xx with exponential backoff; other errors become CloudError
 * with the API's Code, HTTP status and RequestId.
 */
import { retry, sleep } from '@cnikit/netlib/retry';
import { OpenApiError, RpcClient, ClientError, type Params } from './openapi';
import type { EniCloud, EniInfo, EniQuota, VSwitchInfo } from '../pool';
import { ip } from '@cnikit/netlib';

export interface AliyunOptions {
  regionId: string;
  instanceId: string;
  accessKeyId: string;
  accessKeySecret: string;
  /** host[:port]; defaults to the region's documented endpoints (ecs.<region>.aliyuncs.com, vpc.<region>.aliyuncs.com). */
  ecsEndpoint?: string;
  vpcEndpoint?: string;
  protocol?: 'http' | 'https';
  readTimeoutMs?: number;
  /** Poll interval while waiting for InUse / Available (default 100 ms). */
  pollIntervalMs?: number;
  /** How long an attach or detach may take (default 60 s). */
  stateTimeoutMs?: number;
  /** Retries of Throttling / 5xx answers (default 4). */
  maxRetries?: number;
  retryBaseMs?: number;
  /** Called after every OpenAPI request (each retry counts) with its latency and error code ('' on success): metrics. */
  onCall?: (action: string, ms: number, errorCode: string) => void;
}

export class CloudError extends Error {
  constructor(
    readonly action: string,
    readonly code: string,
    readonly status: number | undefined,
    readonly requestId: string | undefined,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`openapi: ${action}: ${code}: ${message}${requestId ? ` (RequestId ${requestId})` : ''}`, options);
    this.name = 'CloudError';
  }

  get retryable(): boolean {
    return (
      /^Throttling/.test(this.code) || this.code === 'ServiceUnavailable' || this.code === 'InternalError' || (this.status ?? 0) >= 500
    );
  }
}

/** What DescribeInstanceTypes says about ENIs beyond the pool's quota. */
export interface InstanceQuota extends EniQuota {
  /** EniTrunkSupported. */
  trunkSupported: boolean;
  /** EniTotalQuantity: EniQuantity plus the member ENIs a trunk ENI can carry. */
  eniTotalQuantity: number;
  /** EniIpv6AddressQuantity: IPv6 addresses per ENI (0: no IPv6). */
  ipv6PerEni: number;
}

/** Member ENIs the instance can hold through a trunk ENI (0 when it has no trunk support). */
export function memberEniQuota(q: InstanceQuota): number {
  return q.trunkSupported ? Math.max(0, q.eniTotalQuantity - q.eniQuantity) : 0;
}

/** An ENI as DescribeNetworkInterfaces reports it. */
export interface EniView {
  eniId: string;
  status: string;
  /** Primary, Secondary, Trunk or Member. */
  type: string;
  /** Attachment.TrunkNetworkInterfaceId of a member ENI. */
  trunkEniId?: string;
  instanceId: string;
  mac: string;
  vswitchId: string;
  primaryIp: string;
  ips: string[];
  /** Ipv6Sets. */
  ipv6s: string[];
}

export class AliyunEniCloud implements EniCloud {
  private readonly ecs: RpcClient;
  private readonly vpc: RpcClient;
  private readonly cidrs = new Map<string, string>();
  private readonly cidrs6 = new Map<string, string>();

  constructor(private readonly opts: AliyunOptions) {
    const base = {
      accessKeyId: opts.accessKeyId,
      accessKeySecret: opts.accessKeySecret,
      protocol: opts.protocol ?? 'https',
      readTimeoutMs: opts.readTimeoutMs ?? 10_000,
      connectTimeoutMs: 5000,
    };
    this.ecs = new RpcClient({ ...base, version: '2014-05-26', endpoint: opts.ecsEndpoint ?? `ecs.${opts.regionId}.aliyuncs.com` });
    this.vpc = new RpcClient({ ...base, version: '2016-04-28', endpoint: opts.vpcEndpoint ?? `vpc.${opts.regionId}.aliyuncs.com` });
  }

  /** One ECS call (RegionId added: every ECS action terway calls takes it, DescribeInstanceTypes aside). */
  private ecsCall<T>(action: string, params: Params, region = true): Promise<T> {
    const p = region ? { RegionId: this.opts.regionId, ...params } : params;
    return this.call(action, () => this.ecs.call(action, p) as Promise<T>);
  }

  /** Calls the API, retrying retryable failures (doubling from retryBaseMs); rethrows others as CloudError. */
  private call<T>(action: string, fn: () => Promise<T>): Promise<T> {
    const backoff = {
      steps: (this.opts.maxRetries ?? 4) + 1,
      initialMs: this.opts.retryBaseMs ?? 100,
      factor: 2,
      jitter: 0,
      capMs: Infinity,
    };
    const isRetryable = (err: unknown): boolean => err instanceof CloudError && err.retryable;
    return retry({ backoff, retriable: isRetryable }, async () => {
      const t0 = performance.now();
      try {
        const r = await fn();
        this.opts.onCall?.(action, performance.now() - t0, '');
        return r;
      } catch (e) {
        const err = toCloudError(action, e);
        this.opts.onCall?.(action, performance.now() - t0, err.code);
        throw err;
      }
    });
  }

  async instanceQuota(instanceType: string): Promise<InstanceQuota> {
    const r = await this.ecsCall<DescribeInstanceTypesAnswer>('DescribeInstanceTypes', { InstanceTypes: [instanceType] }, false);
    const t = r.InstanceTypes?.InstanceType?.find((x) => x.InstanceTypeId === instanceType);
    if (!t || !t.EniQuantity || !t.EniPrivateIpAddressQuantity)
      throw new CloudError(
        'DescribeInstanceTypes',
        'InvalidInstanceType.NotFound',
        undefined,
        r.RequestId,
        `no ENI quota for ${instanceType}`,
      );
    return {
      eniQuantity: t.EniQuantity,
      ipsPerEni: t.EniPrivateIpAddressQuantity,
      trunkSupported: t.EniTrunkSupported === true,
      eniTotalQuantity: t.EniTotalQuantity ?? t.EniQuantity,
      ipv6PerEni: t.EniIpv6AddressQuantity ?? 0,
    };
  }

  async describeVSwitches(ids: string[]): Promise<VSwitchInfo[]> {
    const out: VSwitchInfo[] = [];
    for (const id of ids) {
      const params = { RegionId: this.opts.regionId, VSwitchId: id, PageSize: 50 };
      const r = await this.call('DescribeVSwitches', () => this.vpc.call('DescribeVSwitches', params) as Promise<DescribeVSwitchesAnswer>);
      for (const v of r.VSwitches?.VSwitch ?? []) {
        if (!v.VSwitchId || !v.CidrBlock) continue;
        this.cidrs.set(v.VSwitchId, v.CidrBlock);
        if (v.Ipv6CidrBlock) this.cidrs6.set(v.VSwitchId, v.Ipv6CidrBlock);
        out.push({ id: v.VSwitchId, zone: v.ZoneId ?? '', cidr: v.CidrBlock, available: v.AvailableIpAddressCount ?? 0 });
      }
    }
    return out;
  }

  /** Every ENI matching the filter, following NextToken. */
  async listEnis(filter: { instanceId?: string; ids?: string[]; type?: 'Primary' | 'Secondary' } = {}, pageSize = 100): Promise<EniView[]> {
    const out: EniView[] = [];
    let token: string | undefined;
    do {
      const r = await this.ecsCall<DescribeNetworkInterfacesAnswer>('DescribeNetworkInterfaces', {
        MaxResults: pageSize,
        NextToken: token,
        InstanceId: filter.instanceId,
        NetworkInterfaceId: filter.ids,
        Type: filter.type,
      });
      for (const e of r.NetworkInterfaceSets?.NetworkInterfaceSet ?? []) out.push(eniView(e));
      token = r.NextToken || undefined;
    } while (token);
    return out;
  }

  private async waitStatus(eniId: string, want: string): Promise<EniView> {
    const deadline = Date.now() + (this.opts.stateTimeoutMs ?? 60_000);
    for (;;) {
      const [e] = await this.listEnis({ ids: [eniId] }, 10);
      if (e && e.status === want) return e;
      if (Date.now() > deadline)
        throw new CloudError(
          'DescribeNetworkInterfaces',
          'Timeout',
          undefined,
          undefined,
          `${eniId} is ${e?.status ?? 'gone'}, not ${want}, after ${this.opts.stateTimeoutMs ?? 60_000} ms`,
        );
      await sleep(this.opts.pollIntervalMs ?? 100);
    }
  }

  private async cidrOf(vswitchId: string): Promise<string> {
    if (!this.cidrs.has(vswitchId)) await this.describeVSwitches([vswitchId]);
    const c = this.cidrs.get(vswitchId);
    if (!c) throw new CloudError('DescribeVSwitches', 'InvalidVSwitchId.NotFound', 404, undefined, `vSwitch ${vswitchId} not found`);
    return c;
  }

  /** The EniInfo of an attached ENI (restore at start-up). */
  async eniInfo(e: EniView): Promise<EniInfo> {
    const cidr = await this.cidrOf(e.vswitchId);
    return {
      eniId: e.eniId,
      mac: e.mac,
      primaryIp: e.primaryIp,
      vswitchId: e.vswitchId,
      vswitchCidr: cidr,
      gateway: gatewayOf(cidr),
      ips: e.ips,
      ...(e.ipv6s.length ? { ipv6s: e.ipv6s } : {}),
    };
  }

  /** The vSwitch's Ipv6CidrBlock (undefined when IPv6 is off there). */
  async ipv6CidrOf(vswitchId: string): Promise<string | undefined> {
    if (!this.cidrs.has(vswitchId)) await this.describeVSwitches([vswitchId]);
    return this.cidrs6.get(vswitchId);
  }

  /** AssignIpv6Addresses: `count` new IPv6 addresses on the ENI. */
  async assignIpv6s(eniId: string, count: number): Promise<string[]> {
    const r = await this.ecsCall<{ Ipv6Sets?: { Ipv6Address?: string[] } }>('AssignIpv6Addresses', {
      NetworkInterfaceId: eniId,
      Ipv6AddressCount: count,
    });
    return r.Ipv6Sets?.Ipv6Address ?? [];
  }

  async unassignIpv6s(eniId: string, ips: string[]): Promise<void> {
    await this.ecsCall('UnassignIpv6Addresses', { NetworkInterfaceId: eniId, Ipv6Address: ips });
  }

  /**
   * Creates an ENI and attaches it (waiting for InUse). `trunk` creates a trunk ENI
   * (CreateNetworkInterface InstanceType=Trunk); `memberOf` attaches the new ENI as a
   * member of that trunk ENI (AttachNetworkInterface TrunkNetworkInstanceId).
   */
  async createEni(req: {
    vswitchId: string;
    securityGroups: string[];
    ipCount: number;
    trunk?: boolean;
    memberOf?: string;
  }): Promise<EniInfo> {
    const created = await this.ecsCall<{ RequestId?: string; NetworkInterfaceId?: string }>('CreateNetworkInterface', {
      VSwitchId: req.vswitchId,
      // SecurityGroupId for one group, SecurityGroupIds.N for several (the API takes one or the other).
      ...(req.securityGroups.length > 1 ? { SecurityGroupIds: req.securityGroups } : { SecurityGroupId: req.securityGroups[0] ?? '' }),
      SecondaryPrivateIpAddressCount: Math.max(0, req.ipCount - 1),
      Description: 'interface create by terway',
      InstanceType: req.trunk ? 'Trunk' : undefined,
    });
    const eniId = created.NetworkInterfaceId;
    if (!eniId)
      throw new CloudError(
        'CreateNetworkInterface',
        'EmptyNetworkInterfaceId',
        200,
        created.RequestId,
        'no NetworkInterfaceId in the answer',
      );
    try {
      await this.ecsCall('AttachNetworkInterface', {
        NetworkInterfaceId: eniId,
        InstanceId: this.opts.instanceId,
        TrunkNetworkInstanceId: req.memberOf,
      });
      const view = await this.waitStatus(eniId, 'InUse');
      return await this.eniInfo(view);
    } catch (e) {
      // Do not leak the ENI: detach if needed and delete it, then report the first error.
      await this.deleteEni(eniId).catch(() => undefined);
      throw e;
    }
  }

  async assignIps(eniId: string, count: number): Promise<string[]> {
    const r = await this.ecsCall<AssignPrivateIpAddressesAnswer>('AssignPrivateIpAddresses', {
      NetworkInterfaceId: eniId,
      SecondaryPrivateIpAddressCount: count,
    });
    return r.AssignedPrivateIpAddressesSet?.PrivateIpSet?.PrivateIpAddress ?? [];
  }

  async unassignIps(eniId: string, ips: string[]): Promise<void> {
    await this.ecsCall('UnassignPrivateIpAddresses', { NetworkInterfaceId: eniId, PrivateIpAddress: ips });
  }

  async deleteEni(eniId: string): Promise<void> {
    const [e] = await this.listEnis({ ids: [eniId] }, 10);
    if (!e) return;
    if (e.status === 'Attaching') await this.waitStatus(eniId, 'InUse');
    if (e.status === 'InUse' || e.status === 'Attaching') {
      await this.ecsCall('DetachNetworkInterface', { NetworkInterfaceId: eniId, InstanceId: this.opts.instanceId });
    }
    if (e.status !== 'Available') await this.waitStatus(eniId, 'Available');
    await this.ecsCall('DeleteNetworkInterface', { NetworkInterfaceId: eniId });
  }
}

/** Alibaba Cloud keeps the last three addresses of a vSwitch; its gateway is the last but two. */
export function gatewayOf(cidr: string): string {
  return ip.offsetIp(ip.broadcast(cidr), -2);
}

/** An error answer keeps its Code, status and RequestId; a failure before any answer its code (ECONNREFUSED...), no status. */
function toCloudError(action: string, e: unknown): CloudError {
  if (e instanceof CloudError) return e;
  if (e instanceof OpenApiError) return new CloudError(action, e.code, e.status, e.requestId, e.message, { cause: e });
  if (e instanceof ClientError) return new CloudError(action, e.code, undefined, undefined, e.message, { cause: e });
  return new CloudError(action, 'NetworkError', undefined, undefined, e instanceof Error ? e.message : String(e), { cause: e });
}

function eniView(e: EniAnswer): EniView {
  const trunk = e.Attachment?.TrunkNetworkInterfaceId;
  return {
    eniId: e.NetworkInterfaceId ?? '',
    status: e.Status ?? '',
    type: e.Type ?? '',
    ...(trunk ? { trunkEniId: trunk } : {}),
    instanceId: e.InstanceId ?? '',
    mac: e.MacAddress ?? '',
    vswitchId: e.VSwitchId ?? '',
    primaryIp: e.PrivateIpAddress ?? '',
    ips: (e.PrivateIpSets?.PrivateIpSet ?? []).map((s) => s.PrivateIpAddress ?? '').filter(Boolean),
    ipv6s: (e.Ipv6Sets?.Ipv6Set ?? []).map((s) => s.Ipv6Address ?? '').filter(Boolean),
  };
}

// The parts of the JSON answers read here, named as the API reference names them (every field may be absent).

interface DescribeInstanceTypesAnswer {
  RequestId?: string;
  InstanceTypes?: {
    InstanceType?: {
      InstanceTypeId?: string;
      EniQuantity?: number;
      EniPrivateIpAddressQuantity?: number;
      EniIpv6AddressQuantity?: number;
      EniTotalQuantity?: number;
      EniTrunkSupported?: boolean;
    }[];
  };
}

interface DescribeVSwitchesAnswer {
  VSwitches?: {
    VSwitch?: { VSwitchId?: string; ZoneId?: string; CidrBlock?: string; Ipv6CidrBlock?: string; AvailableIpAddressCount?: number }[];
  };
}

interface EniAnswer {
  NetworkInterfaceId?: string;
  Status?: string;
  Type?: string;
  InstanceId?: string;
  MacAddress?: string;
  VSwitchId?: string;
  PrivateIpAddress?: string;
  PrivateIpSets?: { PrivateIpSet?: { PrivateIpAddress?: string }[] };
  Ipv6Sets?: { Ipv6Set?: { Ipv6Address?: string }[] };
  Attachment?: { TrunkNetworkInterfaceId?: string };
}

interface DescribeNetworkInterfacesAnswer {
  NetworkInterfaceSets?: { NetworkInterfaceSet?: EniAnswer[] };
  NextToken?: string;
}

interface AssignPrivateIpAddressesAnswer {
  AssignedPrivateIpAddressesSet?: { PrivateIpSet?: { PrivateIpAddress?: string[] } };
}
