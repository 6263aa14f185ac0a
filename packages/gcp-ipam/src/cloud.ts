/**
 * The cloud's side of a node, for `cnikit doctor`: the alias ranges GCE holds on the node's VM, read with the
 * node's own ipam section (its project, zone, instance, endpoints and credentials), one attempt.
 */
import type { NetConf } from '@cnikit/netlib';
import { parseIpamConfig } from './config';
import { GceClient, metadataToken } from './gce';

export interface NodeAliases {
  instance: string;
  zone: string;
  nic: string;
  /** Addresses of the /32 alias ranges (other ranges as they are); empty when GCE did not answer. */
  aliases: string[];
  /** Why GCE did not answer (the node's config itself is checked first: a bad one throws). */
  error?: string;
}

export async function nodeAliases(conf: NetConf): Promise<NodeAliases> {
  const cfg = parseIpamConfig(conf);
  const gce = new GceClient({
    project: cfg.project,
    endpoint: cfg.computeEndpoint,
    token: cfg.auth === 'metadata' ? metadataToken(cfg.metadataEndpoint) : undefined,
    maxAttempts: 1,
  });
  const where = { instance: cfg.instance, zone: cfg.zone, nic: cfg.networkInterface };
  try {
    const inst = await gce.getInstance(cfg.zone, cfg.instance);
    const nic = inst.networkInterfaces?.find((n) => n.name === cfg.networkInterface);
    return { ...where, aliases: (nic?.aliasIpRanges ?? []).map((a) => a.ipCidrRange.replace(/\/32$/, '')) };
  } catch (err) {
    return { ...where, aliases: [], error: (err as Error).message };
  } finally {
    gce.close();
  }
}
