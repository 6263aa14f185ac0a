/**
 * The EC2 calls the operator makes, through our own client of EC2's Query API (ec2-query.ts: SigV4-signed form
 * POSTs, XML answers; endpoint override for moto or a proxy). Every call takes a token from one shared bucket
 * and is retried on throttling and server errors here, so that each attempt is counted and rate-limited.
 * (The class keeps its name from when it wrapped @aws-sdk/client-ec2: callers and tests name it.)
 */
import { defaultCredentials, staticCredentials } from './aws-credentials';
import { Ec2QueryClient, filterParams, listParams, tagParams, type QueryParams } from './ec2-query';
import { child, items, textAt, type XmlElement } from './xml';
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

/** What the operator needs from EC2; implemented by SdkEc2 (EC2's Query API) and by tests' fakes. */
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

/** An EC2 `tagSet` (`<item><key/><value/></item>`) as a map. */
const tagMap = (el: XmlElement | undefined): Record<string, string> =>
  Object.fromEntries(
    items(el, 'tagSet')
      .filter((t) => textAt(t, 'key'))
      .map((t) => [textAt(t, 'key')!, textAt(t, 'value') ?? '']),
  );
/** The text of `field` in each `<item>` of `set`, empty ones left out. */
const itemTexts = (el: XmlElement | undefined, set: string, field: string): string[] =>
  items(el, set)
    .map((i) => textAt(i, field) ?? '')
    .filter(Boolean);
const optInt = (s: string | undefined): number | undefined => (s === undefined || s === '' ? undefined : Number(s));

/** A `networkInterface` element (DescribeNetworkInterfaces' item, CreateNetworkInterface's answer). */
export function eniFromXml(n: XmlElement | undefined): Ec2Eni {
  const primary = textAt(n, 'privateIpAddress') ?? '';
  const att = child(n, 'attachment');
  return {
    id: textAt(n, 'networkInterfaceId') ?? '',
    mac: textAt(n, 'macAddress') ?? '',
    ip: primary,
    subnetId: textAt(n, 'subnetId') ?? '',
    vpcId: textAt(n, 'vpcId') ?? '',
    availabilityZone: textAt(n, 'availabilityZone'),
    instanceId: textAt(att, 'instanceId'),
    attachmentId: textAt(att, 'attachmentId'),
    deviceIndex: optInt(textAt(att, 'deviceIndex')),
    status: textAt(n, 'status'),
    addresses: itemTexts(n, 'privateIpAddressesSet', 'privateIpAddress').filter((a) => a !== primary),
    prefixes: itemTexts(n, 'ipv4PrefixSet', 'ipv4Prefix'),
    securityGroups: itemTexts(n, 'groupSet', 'groupId'),
    tags: tagMap(n),
    description: textAt(n, 'description'),
  };
}

export class SdkEc2 implements Ec2Api {
  readonly client: Ec2QueryClient;
  readonly limiter: TokenBucket;
  readonly stats: Ec2Stats = { calls: {}, attempts: 0, throttled: 0, retried: 0, failed: 0 };
  private readonly backoff: Backoff;

  constructor(private readonly opts: SdkEc2Options = {}) {
    const region = opts.region ?? 'us-east-1';
    this.client = new Ec2QueryClient({
      region,
      endpoint: opts.endpoint,
      // An emulator or proxy takes any credentials; the real endpoint gets the deployment's (aws-credentials.ts).
      credentials: opts.endpoint
        ? staticCredentials({ accessKeyId: 'testing', secretAccessKey: 'testing' })
        : defaultCredentials(process.env, region),
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

  /** `call` of one Query API action: its answer's root element. */
  private query(action: string, params: QueryParams = {}): Promise<XmlElement> {
    return this.call(action, (signal) => this.client.request(action, params, signal));
  }

  async describeNetworkInterfaces(filter: EniFilter = {}): Promise<Ec2Eni[]> {
    const filters: { name: string; values: string[] }[] = [];
    if (filter.ids) filters.push({ name: 'network-interface-id', values: filter.ids });
    if (filter.instanceId) filters.push({ name: 'attachment.instance-id', values: [filter.instanceId] });
    if (filter.status) filters.push({ name: 'status', values: [filter.status] });
    for (const [k, v] of Object.entries(filter.tags ?? {})) filters.push({ name: `tag:${k}`, values: [v] });
    const out: Ec2Eni[] = [];
    let NextToken: string | undefined;
    do {
      const r = await this.query('DescribeNetworkInterfaces', { ...filterParams(filters), NextToken });
      out.push(...items(r, 'networkInterfaceSet').map(eniFromXml));
      NextToken = textAt(r, 'nextToken') || undefined;
    } while (NextToken);
    return out;
  }

  async describeSubnets(): Promise<Ec2Subnet[]> {
    const r = await this.query('DescribeSubnets');
    return items(r, 'subnetSet').map((s) => ({
      id: textAt(s, 'subnetId') ?? '',
      cidr: textAt(s, 'cidrBlock') ?? '',
      vpcId: textAt(s, 'vpcId') ?? '',
      availabilityZone: textAt(s, 'availabilityZone') ?? '',
      availableAddresses: optInt(textAt(s, 'availableIpAddressCount')) ?? 0,
      tags: tagMap(s),
    }));
  }

  async describeVpcs(): Promise<Ec2Vpc[]> {
    const r = await this.query('DescribeVpcs');
    return items(r, 'vpcSet').map((v) => ({
      id: textAt(v, 'vpcId') ?? '',
      primaryCidr: textAt(v, 'cidrBlock') ?? '',
      cidrs: itemTexts(v, 'cidrBlockAssociationSet', 'cidrBlock'),
    }));
  }

  async describeSecurityGroups(tags: Record<string, string>): Promise<string[]> {
    const filters = Object.entries(tags).map(([k, v]) => ({ name: `tag:${k}`, values: [v] }));
    const r = await this.query('DescribeSecurityGroups', filterParams(filters));
    return itemTexts(r, 'securityGroupInfo', 'groupId');
  }

  async describeInstance(instanceId: string): Promise<Ec2Instance | undefined> {
    try {
      const r = await this.query('DescribeInstances', listParams('InstanceId', [instanceId]));
      const i = items(items(r, 'reservationSet')[0], 'instancesSet')[0];
      if (!i) return undefined;
      return {
        id: textAt(i, 'instanceId') ?? instanceId,
        state: textAt(i, 'instanceState/name') ?? 'unknown',
        type: textAt(i, 'instanceType'),
        vpcId: textAt(i, 'vpcId'),
        subnetId: textAt(i, 'subnetId'),
        availabilityZone: textAt(i, 'placement/availabilityZone'),
      };
    } catch (err) {
      if (errorCode((err as Ec2Error).cause) === 'InvalidInstanceID.NotFound') return undefined;
      throw err;
    }
  }

  async createNetworkInterface(req: CreateEniRequest): Promise<Ec2Eni> {
    const tagged = Object.keys(req.tags).length > 0;
    const r = await this.query('CreateNetworkInterface', {
      SubnetId: req.subnetId,
      ...listParams('SecurityGroupId', req.securityGroups),
      Description: req.description,
      SecondaryPrivateIpAddressCount: req.secondaryCount || undefined,
      Ipv4PrefixCount: req.prefixCount || undefined,
      ...(tagged ? { 'TagSpecification.1.ResourceType': 'network-interface', ...tagParams('TagSpecification.1.Tag', req.tags) } : {}),
    });
    const eni = eniFromXml(child(r, 'networkInterface'));
    // Some emulators drop TagSpecifications on this call: tag explicitly when the answer lacks the tags.
    if (Object.entries(req.tags).some(([k, v]) => eni.tags[k] !== v)) {
      await this.query('CreateTags', { ...listParams('ResourceId', [eni.id]), ...tagParams('Tag', req.tags) });
      eni.tags = { ...eni.tags, ...req.tags };
    }
    return eni;
  }

  async attachNetworkInterface(eniId: string, instanceId: string, deviceIndex: number): Promise<string> {
    const r = await this.query('AttachNetworkInterface', { NetworkInterfaceId: eniId, InstanceId: instanceId, DeviceIndex: deviceIndex });
    return textAt(r, 'attachmentId') ?? '';
  }

  async setDeleteOnTermination(eniId: string, attachmentId: string): Promise<void> {
    await this.query('ModifyNetworkInterfaceAttribute', {
      NetworkInterfaceId: eniId,
      'Attachment.AttachmentId': attachmentId,
      'Attachment.DeleteOnTermination': true,
    });
  }

  async detachNetworkInterface(attachmentId: string): Promise<void> {
    await this.query('DetachNetworkInterface', { AttachmentId: attachmentId, Force: true });
  }

  async deleteNetworkInterface(eniId: string): Promise<void> {
    await this.query('DeleteNetworkInterface', { NetworkInterfaceId: eniId });
  }

  async assignPrivateIpAddresses(eniId: string, count: number): Promise<string[]> {
    const r = await this.query('AssignPrivateIpAddresses', { NetworkInterfaceId: eniId, SecondaryPrivateIpAddressCount: count });
    return itemTexts(r, 'assignedPrivateIpAddressesSet', 'privateIpAddress');
  }

  async assignPrefixes(eniId: string, count: number): Promise<string[]> {
    const r = await this.query('AssignPrivateIpAddresses', { NetworkInterfaceId: eniId, Ipv4PrefixCount: count });
    return itemTexts(r, 'assignedIpv4PrefixSet', 'ipv4Prefix');
  }

  async unassignPrivateIpAddresses(eniId: string, ips: string[]): Promise<void> {
    await this.query('UnassignPrivateIpAddresses', { NetworkInterfaceId: eniId, ...listParams('PrivateIpAddress', ips) });
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
