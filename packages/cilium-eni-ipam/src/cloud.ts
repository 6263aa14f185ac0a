/**
 * The cloud's side of a node, for `cnikit doctor --cloud`: the addresses EC2 assigns to the ENIs that
 * cilium-eni-agent's book names, in one DescribeNetworkInterfaces call (one attempt: doctor reports, it does
 * not wait out a throttled API). Credentials as the operator's (aws-credentials.ts: the environment, else the
 * node's instance role from IMDSv2).
 */
import { SdkEc2 } from './ec2';

export interface EniAddresses {
  /** ENI ID -> its secondary IPv4 addresses and /28 prefixes, for each ENI EC2 still has. */
  enis: Record<string, { addresses: string[]; prefixes: string[] }>;
  /** Why EC2 did not answer; nothing is judged by an unanswered read. */
  error?: string;
}

export interface EniAddressesOptions {
  /** EC2 endpoint override (moto, a proxy); default: the region's. */
  endpoint?: string;
  region?: string;
  timeoutMs?: number;
}

export async function eniAddresses(ids: string[], o: EniAddressesOptions = {}): Promise<EniAddresses> {
  const ec2 = new SdkEc2({
    endpoint: o.endpoint,
    region: o.region,
    timeoutMs: o.timeoutMs ?? 10_000,
    retry: { attempts: 1, initialMs: 0, maxMs: 0 },
  });
  try {
    const found = await ec2.describeNetworkInterfaces({ ids: [...new Set(ids)].sort() });
    return { enis: Object.fromEntries(found.map((e) => [e.id, { addresses: e.addresses, prefixes: e.prefixes }])) };
  } catch (err) {
    return { enis: {}, error: (err as Error).message };
  } finally {
    ec2.client.destroy();
  }
}
