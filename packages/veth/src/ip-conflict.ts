/**
 * ip_conflict: before wiring the pod, make sure no other host on the chained
 * interface's L2 segment already answers for the pod's addresses.
 *
 * IPv4: duplicate address detection with `arping -D` (iputils) run inside
 * the pod's netns on the chained interface; an answer means a conflict.
 * IPv6: the kernel already ran DAD when the previous plugin added the
 * address; we wait while the address is tentative and fail if the kernel
 * marked it dadfailed.
 */
import { addr, CniError, execInNetns, type Netns } from '@cnikit/netlib';
import type { IpConflict } from './config';
import { sleep } from '@cnikit/netlib/retry';

/** Code of an IP conflict: plugin-specific range (>= 100). */
export const CODE_IP_CONFLICT = 101;

const IFA_F_DADFAILED = 0x08;
const IFA_F_TENTATIVE = 0x40;

async function probeV4(ns: Netns, ifName: string, ipAddr: string, opts: IpConflict): Promise<void> {
  const waitSec = Math.max(1, Math.ceil((opts.intervalMs * opts.retries) / 1000));
  const res = await execInNetns(ns, 'arping', ['-D', '-q', '-I', ifName, '-c', String(opts.retries), '-w', String(waitSec), ipAddr]);
  if (res.code === 1) {
    throw new CniError(CODE_IP_CONFLICT, 'IP address conflict', `another host on ${ifName} answers ARP for ${ipAddr}`);
  }
  if (res.code !== 0) {
    throw new CniError(
      CODE_IP_CONFLICT,
      'IP conflict probe failed',
      `arping -D ${ipAddr} on ${ifName} exited ${res.code}: ${res.stderr.trim()}`,
    );
  }
}

async function probeV6(ns: Netns, ifIndex: number, ifName: string, ipAddr: string, opts: IpConflict): Promise<void> {
  for (let i = 0; i <= opts.retries; i++) {
    const a = (await addr.list(ns, { index: ifIndex, family: 6 })).find((x) => x.address.split('/')[0] === ipAddr);
    const flags = a?.flags ?? 0;
    if (flags & IFA_F_DADFAILED) {
      throw new CniError(CODE_IP_CONFLICT, 'IP address conflict', `duplicate address detection failed for ${ipAddr} on ${ifName}`);
    }
    if (!(flags & IFA_F_TENTATIVE)) return;
    await sleep(opts.intervalMs);
  }
  throw new CniError(CODE_IP_CONFLICT, 'IP conflict probe timed out', `${ipAddr} on ${ifName} is still tentative`);
}

export async function checkIpConflicts(ns: Netns, ifIndex: number, ifName: string, ips: string[], opts: IpConflict): Promise<void> {
  if (!opts.enabled) return;
  await Promise.all(
    ips.map((ipAddr) => (ipAddr.includes(':') ? probeV6(ns, ifIndex, ifName, ipAddr, opts) : probeV4(ns, ifName, ipAddr, opts))),
  );
}
