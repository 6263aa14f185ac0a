/**
 * The pool's cloud through the official Alibaba Cloud SDK packages
 * (@alicloud/ecs20140526, @alicloud/vpc20160428 on @alicloud/openapi-core,
 * V3 ACS3-HMAC-SHA256 signatures), endpoint overridable (tests point it at
 * FakeOpenApi). Waits for the async ENI states itself; retries Throttling and
 * 5xx with exponential backoff; other errors become CloudError with the API's
 * Code, HTTP status and RequestId.
 */
import Ecs, * as $Ecs from '@alicloud/ecs20140526';
import Vpc, * as $Vpc from '@alicloud/vpc20160428';
import { $OpenApiUtil } from '@alicloud/openapi-core';
import { retry, sleep } from '@cnikit/netlib/retry';
import type { EniCloud, EniInfo, EniQuota, VSwitchInfo } from '../pool';
import { ip } from '@cnikit/netlib';

export interface AliyunOptions {
  regionId: string;
  instanceId: string;
  accessKeyId: string;
  accessKeySecret: string;
  /** host[:port]; defaults to the SDK's regional endpoints. */
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
  private readonly ecs: Ecs;
  private readonly vpc: Vpc;
  private readonly cidrs = new Map<string, string>();
  private readonly cidrs6 = new Map<string, string>();

  constructor(private readonly opts: AliyunOptions) {
    const base = {
      accessKeyId: opts.accessKeyId,
      accessKeySecret: opts.accessKeySecret,
      regionId: opts.regionId,
      protocol: opts.protocol ?? 'https',
      readTimeout: opts.readTimeoutMs ?? 10_000,
      connectTimeout: 5000,
    };
    this.ecs = new Ecs(new $OpenApiUtil.Config({ ...base, ...(opts.ecsEndpoint ? { endpoint: opts.ecsEndpoint } : {}) }));
    this.vpc = new Vpc(new $OpenApiUtil.Config({ ...base, ...(opts.vpcEndpoint ? { endpoint: opts.vpcEndpoint } : {}) }));
  }

  /** Calls the SDK, retrying retryable failures (doubling from retryBaseMs); rethrows others as CloudError. */
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
    const r = await this.call('DescribeInstanceTypes', () =>
      this.ecs.describeInstanceTypes(new $Ecs.DescribeInstanceTypesRequest({ instanceTypes: [instanceType] })),
    );
    const t = r.body?.instanceTypes?.instanceType?.find((x) => x.instanceTypeId === instanceType);
    if (!t || !t.eniQuantity || !t.eniPrivateIpAddressQuantity)
      throw new CloudError(
        'DescribeInstanceTypes',
        'InvalidInstanceType.NotFound',
        undefined,
        r.body?.requestId,
        `no ENI quota for ${instanceType}`,
      );
    return {
      eniQuantity: t.eniQuantity,
      ipsPerEni: t.eniPrivateIpAddressQuantity,
      trunkSupported: t.eniTrunkSupported === true,
      eniTotalQuantity: t.eniTotalQuantity ?? t.eniQuantity,
      ipv6PerEni: t.eniIpv6AddressQuantity ?? 0,
    };
  }

  async describeVSwitches(ids: string[]): Promise<VSwitchInfo[]> {
    const out: VSwitchInfo[] = [];
    for (const id of ids) {
      const r = await this.call('DescribeVSwitches', () =>
        this.vpc.describeVSwitches(new $Vpc.DescribeVSwitchesRequest({ regionId: this.opts.regionId, vSwitchId: id, pageSize: 50 })),
      );
      for (const v of r.body?.vSwitches?.vSwitch ?? []) {
        if (!v.vSwitchId || !v.cidrBlock) continue;
        this.cidrs.set(v.vSwitchId, v.cidrBlock);
        if (v.ipv6CidrBlock) this.cidrs6.set(v.vSwitchId, v.ipv6CidrBlock);
        out.push({ id: v.vSwitchId, zone: v.zoneId ?? '', cidr: v.cidrBlock, available: v.availableIpAddressCount ?? 0 });
      }
    }
    return out;
  }

  /** Every ENI matching the filter, following NextToken. */
  async listEnis(filter: { instanceId?: string; ids?: string[]; type?: 'Primary' | 'Secondary' } = {}, pageSize = 100): Promise<EniView[]> {
    const out: EniView[] = [];
    let token: string | undefined;
    do {
      const req = new $Ecs.DescribeNetworkInterfacesRequest({
        regionId: this.opts.regionId,
        maxResults: pageSize,
        ...(token ? { nextToken: token } : {}),
        ...(filter.instanceId ? { instanceId: filter.instanceId } : {}),
        ...(filter.ids ? { networkInterfaceId: filter.ids } : {}),
        ...(filter.type ? { type: filter.type } : {}),
      });
      const r = await this.call('DescribeNetworkInterfaces', () => this.ecs.describeNetworkInterfaces(req));
      for (const e of r.body?.networkInterfaceSets?.networkInterfaceSet ?? []) {
        const ips = (e.privateIpSets?.privateIpSet ?? []).map((s) => s.privateIpAddress ?? '').filter(Boolean);
        const trunk = e.attachment?.trunkNetworkInterfaceId;
        const ipv6s = (e.ipv6Sets?.ipv6Set ?? []).map((s) => s.ipv6Address ?? '').filter(Boolean);
        out.push({
          eniId: e.networkInterfaceId ?? '',
          status: e.status ?? '',
          type: e.type ?? '',
          ...(trunk ? { trunkEniId: trunk } : {}),
          instanceId: e.instanceId ?? '',
          mac: e.macAddress ?? '',
          vswitchId: e.vSwitchId ?? '',
          primaryIp: e.privateIpAddress ?? '',
          ips,
          ipv6s,
        });
      }
      token = r.body?.nextToken || undefined;
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
    const r = await this.call('AssignIpv6Addresses', () =>
      this.ecs.assignIpv6Addresses(
        new $Ecs.AssignIpv6AddressesRequest({ regionId: this.opts.regionId, networkInterfaceId: eniId, ipv6AddressCount: count }),
      ),
    );
    return r.body?.ipv6Sets?.ipv6Address ?? [];
  }

  async unassignIpv6s(eniId: string, ips: string[]): Promise<void> {
    await this.call('UnassignIpv6Addresses', () =>
      this.ecs.unassignIpv6Addresses(
        new $Ecs.UnassignIpv6AddressesRequest({ regionId: this.opts.regionId, networkInterfaceId: eniId, ipv6Address: ips }),
      ),
    );
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
    const created = await this.call('CreateNetworkInterface', () =>
      this.ecs.createNetworkInterface(
        new $Ecs.CreateNetworkInterfaceRequest({
          regionId: this.opts.regionId,
          vSwitchId: req.vswitchId,
          ...(req.securityGroups.length > 1 ? { securityGroupIds: req.securityGroups } : { securityGroupId: req.securityGroups[0] ?? '' }),
          secondaryPrivateIpAddressCount: Math.max(0, req.ipCount - 1),
          description: 'interface create by terway',
          ...(req.trunk ? { instanceType: 'Trunk' } : {}),
        }),
      ),
    );
    const eniId = created.body?.networkInterfaceId;
    if (!eniId)
      throw new CloudError(
        'CreateNetworkInterface',
        'EmptyNetworkInterfaceId',
        created.statusCode,
        created.body?.requestId,
        'no NetworkInterfaceId in the answer',
      );
    try {
      await this.call('AttachNetworkInterface', () =>
        this.ecs.attachNetworkInterface(
          new $Ecs.AttachNetworkInterfaceRequest({
            regionId: this.opts.regionId,
            networkInterfaceId: eniId,
            instanceId: this.opts.instanceId,
            ...(req.memberOf ? { trunkNetworkInstanceId: req.memberOf } : {}),
          }),
        ),
      );
      const view = await this.waitStatus(eniId, 'InUse');
      return await this.eniInfo(view);
    } catch (e) {
      // Do not leak the ENI: detach if needed and delete it, then report the first error.
      await this.deleteEni(eniId).catch(() => undefined);
      throw e;
    }
  }

  async assignIps(eniId: string, count: number): Promise<string[]> {
    const r = await this.call('AssignPrivateIpAddresses', () =>
      this.ecs.assignPrivateIpAddresses(
        new $Ecs.AssignPrivateIpAddressesRequest({
          regionId: this.opts.regionId,
          networkInterfaceId: eniId,
          secondaryPrivateIpAddressCount: count,
        }),
      ),
    );
    return r.body?.assignedPrivateIpAddressesSet?.privateIpSet?.privateIpAddress ?? [];
  }

  async unassignIps(eniId: string, ips: string[]): Promise<void> {
    await this.call('UnassignPrivateIpAddresses', () =>
      this.ecs.unassignPrivateIpAddresses(
        new $Ecs.UnassignPrivateIpAddressesRequest({ regionId: this.opts.regionId, networkInterfaceId: eniId, privateIpAddress: ips }),
      ),
    );
  }

  async deleteEni(eniId: string): Promise<void> {
    const [e] = await this.listEnis({ ids: [eniId] }, 10);
    if (!e) return;
    if (e.status === 'Attaching') await this.waitStatus(eniId, 'InUse');
    if (e.status === 'InUse' || e.status === 'Attaching') {
      await this.call('DetachNetworkInterface', () =>
        this.ecs.detachNetworkInterface(
          new $Ecs.DetachNetworkInterfaceRequest({
            regionId: this.opts.regionId,
            networkInterfaceId: eniId,
            instanceId: this.opts.instanceId,
          }),
        ),
      );
    }
    if (e.status !== 'Available') await this.waitStatus(eniId, 'Available');
    await this.call('DeleteNetworkInterface', () =>
      this.ecs.deleteNetworkInterface(new $Ecs.DeleteNetworkInterfaceRequest({ regionId: this.opts.regionId, networkInterfaceId: eniId })),
    );
  }
}

/** Alibaba Cloud keeps the last three addresses of a vSwitch; its gateway is the last but two. */
export function gatewayOf(cidr: string): string {
  return ip.offsetIp(ip.broadcast(cidr), -2);
}

function toCloudError(action: string, e: unknown): CloudError {
  if (e instanceof CloudError) return e;
  const x = e as { code?: unknown; statusCode?: unknown; data?: { RequestId?: string; Message?: string }; message?: string };
  const code = typeof x?.code === 'string' ? x.code : 'NetworkError';
  const status = typeof x?.statusCode === 'number' ? x.statusCode : undefined;
  const msg = x?.data?.Message ?? x?.message ?? String(e);
  return new CloudError(action, code, status, x?.data?.RequestId, msg, { cause: e });
}
