/**
 * The EC2 calls the operator makes, through @aws-sdk/client-ec2 (endpoint override for moto or a proxy).
 * Every call takes a token from one shared bucket and is retried on throttling and server errors; the
 * SDK's own retries are off so that each attempt is counted and rate-limited here.
 */
import {
  AssignPrivateIpAddressesCommand,
  AttachNetworkInterfaceCommand,
  CreateNetworkInterfaceCommand,
  CreateTagsCommand,
  DeleteNetworkInterfaceCommand,
  DescribeInstancesCommand,
  DescribeNetworkInterfacesCommand,
  DescribeSecurityGroupsCommand,
  DescribeSubnetsCommand,
  DescribeVpcsCommand,
  DetachNetworkInterfaceCommand,
  EC2Client,
  ModifyNetworkInterfaceAttributeCommand,
  UnassignPrivateIpAddressesCommand,
  type Filter,
  type NetworkInterface,
  type Tag,
} from '@aws-sdk/client-ec2';
import { retry, type Backoff } from '@cnikit/netlib/retry';
import { DEFAULT_RETRY, TokenBucket, ec2Backoff, errorCode, isRetryable, isThrottle, type RetryPolicy } from './rate-limit';

export interface Ec2Eni {
  id: string;
  mac: string;
  ip: string;
  subnetId: string;
  vpcId: string;
  availabilityZone?: string;
  instanceId?: string;
  attachmentId?: string;
  deviceIndex?: number;
  status?: string;
  addresses: string[];
  prefixes: string[];
  securityGroups: string[];
  tags: Record<string, string>;
  description?: string;
}
export interface Ec2Subnet {
  id: string;
  cidr: string;
  vpcId: string;
  availabilityZone: string;
  availableAddresses: number;
  tags: Record<string, string>;
}
export interface Ec2Vpc {
  id: string;
  primaryCidr: string;
  cidrs: string[];
}
export interface Ec2Instance {
  id: string;
  state: string;
  type?: string;
  vpcId?: string;
  subnetId?: string;
  availabilityZone?: string;
}

export interface CreateEniRequest {
  subnetId: string;
  securityGroups: string[];
  description: string;
  tags: Record<string, string>;
  secondaryCount?: number;
  prefixCount?: number;
}

/** DescribeNetworkInterfaces' filters: every one given must match. */
export interface EniFilter {
  /** The ENIs of these IDs (filter network-interface-id). */
  ids?: string[];
  instanceId?: string;
  tags?: Record<string, string>;
  status?: string;
}

/** What the operator needs from EC2; implemented by SdkEc2 (real SDK) and by tests' fakes. */
export interface Ec2Api {
  describeNetworkInterfaces(filter?: EniFilter): Promise<Ec2Eni[]>;
  describeSubnets(): Promise<Ec2Subnet[]>;
  describeVpcs(): Promise<Ec2Vpc[]>;
  describeSecurityGroups(tags: Record<string, string>): Promise<string[]>;
  describeInstance(instanceId: string): Promise<Ec2Instance | undefined>;
  createNetworkInterface(req: CreateEniRequest): Promise<Ec2Eni>;
  attachNetworkInterface(eniId: string, instanceId: string, deviceIndex: number): Promise<string>;
  setDeleteOnTermination(eniId: string, attachmentId: string): Promise<void>;
  detachNetworkInterface(attachmentId: string): Promise<void>;
  deleteNetworkInterface(eniId: string): Promise<void>;
  assignPrivateIpAddresses(eniId: string, count: number): Promise<string[]>;
  assignPrefixes(eniId: string, count: number): Promise<string[]>;
  unassignPrivateIpAddresses(eniId: string, ips: string[]): Promise<void>;
}

export interface Ec2Stats {
  calls: Record<string, number>;
  attempts: number;
  throttled: number;
  retried: number;
  failed: number;
}

export interface SdkEc2Options {
  endpoint?: string;
  region?: string;
  limiter?: TokenBucket;
  retry?: RetryPolicy;
  /** Per-attempt timeout, ms. Default 30 s. */
  timeoutMs?: number;
  onCall?: (op: string, outcome: 'ok' | 'throttled' | 'error', seconds: number) => void;
}

const tagMap = (tags: Tag[] | undefined): Record<string, string> =>
  Object.fromEntries((tags ?? []).filter((t) => t.Key).map((t) => [t.Key!, t.Value ?? '']));
const tagList = (tags: Record<string, string>): Tag[] => Object.entries(tags).map(([Key, Value]) => ({ Key, Value }));

export function eniFromSdk(n: NetworkInterface): Ec2Eni {
  const primary = n.PrivateIpAddress ?? '';
  return {
    id: n.NetworkInterfaceId ?? '',
    mac: n.MacAddress ?? '',
    ip: primary,
    subnetId: n.SubnetId ?? '',
    vpcId: n.VpcId ?? '',
    availabilityZone: n.AvailabilityZone,
    instanceId: n.Attachment?.InstanceId,
    attachmentId: n.Attachment?.AttachmentId,
    deviceIndex: n.Attachment?.DeviceIndex,
    status: n.Status,
    addresses: (n.PrivateIpAddresses ?? []).map((a) => a.PrivateIpAddress ?? '').filter((a) => a && a !== primary),
    prefixes: (n.Ipv4Prefixes ?? []).map((p) => p.Ipv4Prefix ?? '').filter(Boolean),
    securityGroups: (n.Groups ?? []).map((g) => g.GroupId ?? '').filter(Boolean),
    tags: tagMap(n.TagSet),
    description: n.Description,
  };
}

export class SdkEc2 implements Ec2Api {
  readonly client: EC2Client;
  readonly limiter: TokenBucket;
  readonly stats: Ec2Stats = { calls: {}, attempts: 0, throttled: 0, retried: 0, failed: 0 };
  private readonly backoff: Backoff;

  constructor(private readonly opts: SdkEc2Options = {}) {
    this.client = new EC2Client({
      region: opts.region ?? 'us-east-1',
      endpoint: opts.endpoint,
      maxAttempts: 1,
      credentials: opts.endpoint ? { accessKeyId: 'testing', secretAccessKey: 'testing' } : undefined,
    });
    this.limiter = opts.limiter ?? new TokenBucket();
    this.backoff = ec2Backoff(opts.retry ?? DEFAULT_RETRY);
  }

  /** One EC2 operation: token, attempt, retry with backoff on throttling/server errors. */
  async call<T>(op: string, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    try {
      return await retry({ backoff: this.backoff, retriable: isRetryable }, (attempt) => {
        if (attempt > 1) this.stats.retried++;
        return this.attempt(op, fn);
      });
    } catch (err) {
      this.stats.failed++;
      throw new Ec2Error(op, err);
    }
  }

  /** One attempt: waits for a token, counts it and reports its outcome. */
  private async attempt<T>(op: string, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    await this.limiter.take();
    this.stats.attempts++;
    this.stats.calls[op] = (this.stats.calls[op] ?? 0) + 1;
    const start = performance.now();
    try {
      const r = await fn(AbortSignal.timeout(this.opts.timeoutMs ?? 30_000));
      this.opts.onCall?.(op, 'ok', (performance.now() - start) / 1000);
      return r;
    } catch (err) {
      const throttled = isThrottle(err);
      if (throttled) this.stats.throttled++;
      this.opts.onCall?.(op, throttled ? 'throttled' : 'error', (performance.now() - start) / 1000);
      throw err;
    }
  }

  async describeNetworkInterfaces(filter: EniFilter = {}): Promise<Ec2Eni[]> {
    const Filters: Filter[] = [];
    if (filter.ids) Filters.push({ Name: 'network-interface-id', Values: filter.ids });
    if (filter.instanceId) Filters.push({ Name: 'attachment.instance-id', Values: [filter.instanceId] });
    if (filter.status) Filters.push({ Name: 'status', Values: [filter.status] });
    for (const [k, v] of Object.entries(filter.tags ?? {})) Filters.push({ Name: `tag:${k}`, Values: [v] });
    const out: Ec2Eni[] = [];
    let NextToken: string | undefined;
    do {
      const r = await this.call('DescribeNetworkInterfaces', (abortSignal) =>
        this.client.send(new DescribeNetworkInterfacesCommand({ Filters: Filters.length ? Filters : undefined, NextToken }), {
          abortSignal,
        }),
      );
      out.push(...(r.NetworkInterfaces ?? []).map(eniFromSdk));
      NextToken = r.NextToken;
    } while (NextToken);
    return out;
  }

  async describeSubnets(): Promise<Ec2Subnet[]> {
    const r = await this.call('DescribeSubnets', (abortSignal) => this.client.send(new DescribeSubnetsCommand({}), { abortSignal }));
    return (r.Subnets ?? []).map((s) => ({
      id: s.SubnetId ?? '',
      cidr: s.CidrBlock ?? '',
      vpcId: s.VpcId ?? '',
      availabilityZone: s.AvailabilityZone ?? '',
      availableAddresses: s.AvailableIpAddressCount ?? 0,
      tags: tagMap(s.Tags),
    }));
  }

  async describeVpcs(): Promise<Ec2Vpc[]> {
    const r = await this.call('DescribeVpcs', (abortSignal) => this.client.send(new DescribeVpcsCommand({}), { abortSignal }));
    return (r.Vpcs ?? []).map((v) => ({
      id: v.VpcId ?? '',
      primaryCidr: v.CidrBlock ?? '',
      cidrs: (v.CidrBlockAssociationSet ?? []).map((c) => c.CidrBlock ?? '').filter(Boolean),
    }));
  }

  async describeSecurityGroups(tags: Record<string, string>): Promise<string[]> {
    const Filters = Object.entries(tags).map(([k, v]) => ({ Name: `tag:${k}`, Values: [v] }));
    const r = await this.call('DescribeSecurityGroups', (abortSignal) =>
      this.client.send(new DescribeSecurityGroupsCommand({ Filters }), { abortSignal }),
    );
    return (r.SecurityGroups ?? []).map((g) => g.GroupId ?? '').filter(Boolean);
  }

  async describeInstance(instanceId: string): Promise<Ec2Instance | undefined> {
    try {
      const r = await this.call('DescribeInstances', (abortSignal) =>
        this.client.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] }), { abortSignal }),
      );
      const i = r.Reservations?.[0]?.Instances?.[0];
      if (!i) return undefined;
      return {
        id: i.InstanceId ?? instanceId,
        state: i.State?.Name ?? 'unknown',
        type: i.InstanceType,
        vpcId: i.VpcId,
        subnetId: i.SubnetId,
        availabilityZone: i.Placement?.AvailabilityZone,
      };
    } catch (err) {
      if (errorCode((err as Ec2Error).cause) === 'InvalidInstanceID.NotFound') return undefined;
      throw err;
    }
  }

  async createNetworkInterface(req: CreateEniRequest): Promise<Ec2Eni> {
    const r = await this.call('CreateNetworkInterface', (abortSignal) =>
      this.client.send(
        new CreateNetworkInterfaceCommand({
          SubnetId: req.subnetId,
          Groups: req.securityGroups,
          Description: req.description,
          SecondaryPrivateIpAddressCount: req.secondaryCount || undefined,
          Ipv4PrefixCount: req.prefixCount || undefined,
          TagSpecifications: Object.keys(req.tags).length ? [{ ResourceType: 'network-interface', Tags: tagList(req.tags) }] : undefined,
        }),
        { abortSignal },
      ),
    );
    const eni = eniFromSdk(r.NetworkInterface ?? {});
    // Some emulators drop TagSpecifications on this call: tag explicitly when the answer lacks the tags.
    if (Object.entries(req.tags).some(([k, v]) => eni.tags[k] !== v)) {
      await this.call('CreateTags', (abortSignal) =>
        this.client.send(new CreateTagsCommand({ Resources: [eni.id], Tags: tagList(req.tags) }), { abortSignal }),
      );
      eni.tags = { ...eni.tags, ...req.tags };
    }
    return eni;
  }

  async attachNetworkInterface(eniId: string, instanceId: string, deviceIndex: number): Promise<string> {
    const r = await this.call('AttachNetworkInterface', (abortSignal) =>
      this.client.send(
        new AttachNetworkInterfaceCommand({
          NetworkInterfaceId: eniId,
          InstanceId: instanceId,
          DeviceIndex: deviceIndex,
        }),
        { abortSignal },
      ),
    );
    return r.AttachmentId ?? '';
  }

  async setDeleteOnTermination(eniId: string, attachmentId: string): Promise<void> {
    await this.call('ModifyNetworkInterfaceAttribute', (abortSignal) =>
      this.client.send(
        new ModifyNetworkInterfaceAttributeCommand({
          NetworkInterfaceId: eniId,
          Attachment: { AttachmentId: attachmentId, DeleteOnTermination: true },
        }),
        { abortSignal },
      ),
    );
  }

  async detachNetworkInterface(attachmentId: string): Promise<void> {
    await this.call('DetachNetworkInterface', (abortSignal) =>
      this.client.send(new DetachNetworkInterfaceCommand({ AttachmentId: attachmentId, Force: true }), { abortSignal }),
    );
  }

  async deleteNetworkInterface(eniId: string): Promise<void> {
    await this.call('DeleteNetworkInterface', (abortSignal) =>
      this.client.send(new DeleteNetworkInterfaceCommand({ NetworkInterfaceId: eniId }), { abortSignal }),
    );
  }

  async assignPrivateIpAddresses(eniId: string, count: number): Promise<string[]> {
    const r = await this.call('AssignPrivateIpAddresses', (abortSignal) =>
      this.client.send(
        new AssignPrivateIpAddressesCommand({
          NetworkInterfaceId: eniId,
          SecondaryPrivateIpAddressCount: count,
        }),
        { abortSignal },
      ),
    );
    return (r.AssignedPrivateIpAddresses ?? []).map((a) => a.PrivateIpAddress ?? '').filter(Boolean);
  }

  async assignPrefixes(eniId: string, count: number): Promise<string[]> {
    const r = await this.call('AssignPrivateIpAddresses', (abortSignal) =>
      this.client.send(
        new AssignPrivateIpAddressesCommand({
          NetworkInterfaceId: eniId,
          Ipv4PrefixCount: count,
        }),
        { abortSignal },
      ),
    );
    return (r.AssignedIpv4Prefixes ?? []).map((a) => a.Ipv4Prefix ?? '').filter(Boolean);
  }

  async unassignPrivateIpAddresses(eniId: string, ips: string[]): Promise<void> {
    await this.call('UnassignPrivateIpAddresses', (abortSignal) =>
      this.client.send(
        new UnassignPrivateIpAddressesCommand({
          NetworkInterfaceId: eniId,
          PrivateIpAddresses: ips,
        }),
        { abortSignal },
      ),
    );
  }
}

/** An EC2 call that failed for good; `code` is EC2's error code (RequestLimitExceeded, InsufficientCidrBlocks...). */
export class Ec2Error extends Error {
  readonly code: string;
  constructor(
    readonly op: string,
    cause: unknown,
  ) {
    const code = errorCode(cause);
    super(`ec2: ${op}: ${code}: ${(cause as Error)?.message ?? String(cause)}`, { cause });
    this.name = 'Ec2Error';
    this.code = code;
  }
}
