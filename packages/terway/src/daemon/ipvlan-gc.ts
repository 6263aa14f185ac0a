/**
 * GC of ipvlan-mode leases, driven by the kernel. An ipvlan pod has no host
 * veth to look for; what proves it alive is its own interface: the netns path
 * its AllocIP named still opens and holds an ipvlan link with the lease's IP.
 * A netns that is gone, or one without that address, is a pod deleted without
 * CNI DEL (the runtime destroyed the sandbox). As in veth mode, a lease is
 * judged only after a minute of looking dead (an ADD may sit between AllocIP
 * and its interface), and leases without a recorded netns are kept.
 */
import { addr, link, openNetnsIfPresent } from '@cnikit/netlib';
import type { Clock } from '../clock';
import type { TerwayDaemon } from './daemon';

/** Grace period before a lease that looks dead is released. */
export const GC_GRACE_MS = 60_000;

/** True when `netnsPath` exists and has an ipvlan interface holding `ip`. */
export async function ipvlanPodAlive(netnsPath: string, ip: string): Promise<boolean> {
  const ns = openNetnsIfPresent(netnsPath);
  if (ns === undefined) return false;
  try {
    const ipvlans = new Set((await link.list(ns)).filter((l) => l.kind === 'ipvlan').map((l) => l.index));
    return (await addr.list(ns, { family: 4 })).some((a) => ipvlans.has(a.index) && a.address.split('/')[0] === ip);
  } finally {
    ns.close();
  }
}

export function ipvlanLeaseGc(
  daemon: TerwayDaemon,
  clock: Clock,
  log: (msg: string, fields?: Record<string, unknown>) => void,
): () => Promise<string[]> {
  const firstSeen = new Map<string, number>();
  return async () => {
    const now = clock.now();
    // Probe every lease first (async), then let the daemon release the dead ones in one pass.
    const dead = new Set<string>();
    for (const { key, lease, reservedUntil } of daemon.leases()) {
      const nsPath = daemon.netnsOf(key);
      const ip = lease.ip;
      if (reservedUntil !== undefined || !nsPath) continue; // a sticky IP waits for its pod; an unknown netns is kept
      if (await ipvlanPodAlive(nsPath, ip).catch(() => true)) {
        firstSeen.delete(key);
        continue;
      }
      const seen = firstSeen.get(key) ?? now;
      firstSeen.set(key, seen);
      if (now - seen >= GC_GRACE_MS) dead.add(key);
    }
    const gone = dead.size ? daemon.gc((key) => !dead.has(key)) : [];
    for (const k of gone) firstSeen.delete(k);
    if (gone.length) log('gc', { mode: 'ipvlan', released: gone });
    return gone;
  };
}
