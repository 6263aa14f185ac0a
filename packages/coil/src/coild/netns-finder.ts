/**
 * Finds the network namespace of a running pod from its host veth alone, so coild needs no side file to
 * reach pods it did not set up in this process's lifetime (after a restart).
 *
 * The host veth's IFLA_LINK_NETNSID is the id the node's namespace gave the pod's namespace. Each candidate
 * namespace file (the bind mounts under /run/netns, where CRI runtimes and `ip netns` keep them, then
 * /proc/<pid>/ns/net) is asked for its id in the node's namespace with RTM_GETNSID + NETNSA_FD; the one
 * with the veth's id is the pod's. Candidates are deduplicated by nsfs inode first, so each namespace is
 * opened once however many processes live in it.
 */
import * as fs from 'node:fs';
import { endianness } from 'node:os';
import * as path from 'node:path';
import { link, rtnl, type Netns } from '@cnikit/netlib';

const RTM_GETNSID = 90;
const NETNSA_NSID = 1;
const NETNSA_FD = 3;
const AF_UNSPEC = 0;
// Netlink speaks the host's byte order.
const LE = endianness() === 'LE';
const u16 = (b: Buffer, v: number, off: number): number => (LE ? b.writeUInt16LE(v, off) : b.writeUInt16BE(v, off));
const readU16 = (b: Buffer, off: number): number => (LE ? b.readUInt16LE(off) : b.readUInt16BE(off));

/** The id `hostNs` gives the namespace open as `fd` (the kernel's NETNSA_NSID), or undefined when it has none. */
export async function nsidOf(hostNs: Netns, fd: number): Promise<number | undefined> {
  // struct rtgenmsg (1 byte, padded to 4), then NETNSA_FD (u32).
  const body = Buffer.alloc(12);
  body.writeUInt8(AF_UNSPEC, 0);
  u16(body, 8, 4);
  u16(body, NETNSA_FD, 6);
  if (LE) body.writeUInt32LE(fd, 8);
  else body.writeUInt32BE(fd, 8);
  const [msgs] = await rtnl(hostNs).socket.request(RTM_GETNSID, body);
  for (const m of msgs) {
    for (let off = 4; off + 4 <= m.data.length;) {
      const len = readU16(m.data, off);
      const type = readU16(m.data, off + 2) & 0x3fff;
      if (len < 4) break;
      if (type === NETNSA_NSID && len >= 8) {
        const id = LE ? m.data.readInt32LE(off + 4) : m.data.readInt32BE(off + 4);
        return id < 0 ? undefined : id; // -1: NETNSA_NSID_NOT_ASSIGNED
      }
      off += (len + 3) & ~3;
    }
  }
  return undefined;
}

/** Namespace files that may hold a pod's namespace, one path per namespace (by nsfs device and inode). */
export function candidateNetnsPaths(runDirs: readonly string[] = ['/run/netns', '/var/run/netns']): string[] {
  const seen = new Set<string>();
  const out: string[] = [];
  const consider = (p: string): void => {
    try {
      const st = fs.statSync(p);
      const key = `${st.dev}:${st.ino}`;
      if (seen.has(key)) return;
      seen.add(key);
      out.push(p);
    } catch {
      // gone meanwhile, or not a namespace we may see
    }
  };
  for (const dir of runDirs) {
    let names: string[];
    try {
      names = fs.readdirSync(dir);
    } catch {
      continue;
    }
    for (const n of names) consider(path.join(dir, n));
  }
  for (const pid of fs.readdirSync('/proc')) if (/^\d+$/.test(pid)) consider(`/proc/${pid}/ns/net`);
  return out;
}

/** The path of the namespace whose id in `hostNs` is `nsid`, if some candidate is. */
export async function findNetnsById(
  hostNs: Netns,
  nsid: number,
  candidates: readonly string[] = candidateNetnsPaths(),
): Promise<string | undefined> {
  for (const p of candidates) {
    let fd: number;
    try {
      fd = fs.openSync(p, 'r');
    } catch {
      continue;
    }
    try {
      if ((await nsidOf(hostNs, fd)) === nsid) return p;
    } catch {
      // not a network namespace file (a stray file under /run/netns)
    } finally {
      fs.closeSync(fd);
    }
  }
  return undefined;
}

/** The namespace at the other end of the host veth `hostIndex` in `hostNs`; undefined when it cannot be found. */
export async function findPeerNetns(hostNs: Netns, hostIndex: number, candidates?: readonly string[]): Promise<string | undefined> {
  const l = await link.find(hostNs, hostIndex);
  if (l?.linkNetnsId === undefined) return undefined;
  return findNetnsById(hostNs, l.linkNetnsId, candidates);
}
