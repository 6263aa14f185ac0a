/**
 * The cloud's side of a node, for `cnikit doctor --cloud`: the addresses ECS assigns to the ENIs that terwayd's
 * leases name. Read as terwayd reads them: region and instance from the instance metadata service, keys from the
 * environment (ALIBABA_CLOUD_ACCESS_KEY_ID / ALIBABA_CLOUD_ACCESS_KEY_SECRET) unless given; one attempt (doctor
 * reports, it does not wait out a throttled API). Through aliyun.ts and its own OpenAPI client (openapi.ts): a few
 * hundred lines of node:crypto and node:https where the official SDK was 6.6 MB of minified JavaScript.
 */
import { AliyunEniCloud } from './aliyun';
import { fetchInstanceMeta, METADATA_URL } from './metadata';

export interface NodeEnis {
  /** ENI ID -> the IPv4 (primary first) and IPv6 addresses ECS assigns to it, for each ENI ECS still has. */
  enis: Record<string, { ips: string[]; ipv6s: string[] }>;
  /** Why ECS (or the metadata service) did not answer; nothing is judged by an unanswered read. */
  error?: string;
}

export interface NodeEnisOptions {
  metadataUrl?: string;
  /** ECS endpoint `host[:port]`, or a URL whose scheme sets the protocol; default: the region's. */
  ecsEndpoint?: string;
  accessKeyId?: string;
  accessKeySecret?: string;
  timeoutMs?: number;
}

export async function nodeEnis(ids: string[], o: NodeEnisOptions = {}): Promise<NodeEnis> {
  try {
    const accessKeyId = o.accessKeyId ?? process.env['ALIBABA_CLOUD_ACCESS_KEY_ID'] ?? '';
    const accessKeySecret = o.accessKeySecret ?? process.env['ALIBABA_CLOUD_ACCESS_KEY_SECRET'] ?? '';
    if (!accessKeyId || !accessKeySecret)
      return {
        enis: {},
        error: 'no access key: set ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET (those of eni-config)',
      };
    const meta = await fetchInstanceMeta(o.metadataUrl ?? METADATA_URL, o.timeoutMs ?? 5000);
    const endpoint = o.ecsEndpoint ? /^(https?):\/\/(.+?)\/?$/.exec(o.ecsEndpoint) : null;
    const cloud = new AliyunEniCloud({
      regionId: meta.regionId,
      instanceId: meta.instanceId,
      accessKeyId,
      accessKeySecret,
      ...(o.ecsEndpoint ? { ecsEndpoint: endpoint ? endpoint[2]! : o.ecsEndpoint } : {}),
      ...(endpoint ? { protocol: endpoint[1] as 'http' | 'https' } : {}),
      readTimeoutMs: o.timeoutMs ?? 10_000,
      maxRetries: 0,
    });
    const found = await cloud.listEnis({ ids: [...new Set(ids)].sort() });
    return {
      enis: Object.fromEntries(
        found.map((e) => [e.eniId, { ips: [e.primaryIp, ...e.ips.filter((ip) => ip !== e.primaryIp)], ipv6s: e.ipv6s }]),
      ),
    };
  } catch (err) {
    return { enis: {}, error: (err as Error).message };
  }
}
