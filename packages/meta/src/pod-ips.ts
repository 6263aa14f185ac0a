/**
 * Reading the chained interface's addresses out of prevResult: the IPs the
 * previous plugin (macvlan, sriov, ...) gave the interface this call is about.
 */
import { CniError, CniCode, type Result } from '@cnikit/netlib';

/** Plain addresses (no prefix) of `ifName` in `prev`; IPs that name no interface count as the chained one's. */
export function podIPsOf(prev: Result, ifName: string): string[] {
  const ifaces = prev.interfaces ?? [];
  const out: string[] = [];
  for (const ipc of prev.ips ?? []) {
    const idx = ipc.interface;
    const owner = idx === undefined ? undefined : ifaces[idx];
    if (owner !== undefined && owner.name !== ifName) continue;
    out.push(ipc.address.split('/')[0]!);
  }
  return out;
}

/** Like podIPsOf, but an ADD cannot go on without an address to route to. */
export function requirePodIPs(prev: Result, ifName: string): string[] {
  const ips = podIPsOf(prev, ifName);
  if (ips.length === 0) {
    throw new CniError(
      CniCode.InvalidNetworkConfig,
      'prevResult has no IP address',
      `expected at least one entry in prevResult.ips for interface ${ifName}; is a main plugin (macvlan, sriov) before this one in the chain?`,
    );
  }
  return ips;
}

export function hostCidr(ipAddr: string): string {
  return ipAddr.includes(':') ? `${ipAddr}/128` : `${ipAddr}/32`;
}

export function familyOf(ipAddr: string): 4 | 6 {
  return ipAddr.includes(':') ? 6 : 4;
}
