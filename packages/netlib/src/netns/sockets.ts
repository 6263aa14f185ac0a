/**
 * One rtnetlink socket per network namespace, created inside that namespace.
 *
 * A netlink socket stays bound to the namespace it was created in, whatever the
 * thread does afterwards, so the socket is opened synchronously inside runInNetns
 * and every later (asynchronous) request goes through it from the host namespace.
 * Sockets are cached by namespace identity, so two handles on one namespace share
 * one; a socket is closed when the last handle that used it closes (a socket holds
 * its namespace alive) or by closeAllSockets().
 */
import type { RtNetlinkSocket } from 'netlink/dist/rt/rt';
import { openChannel, type Channel } from '../nl/channel';
import { netnsKey, onNetnsClose, runInNetns, type Netns } from './handle';

interface Entry {
  channel: Channel;
  /** The package's socket for rtnl(): the channel's own when evented, else one opened for it. */
  evented?: Channel;
  /** Handles that asked for this socket and are still open. */
  users: Set<Netns>;
  rt?: RtNetlinkSocket;
}

const entries = new Map<string, Entry>();

function entryFor(ns: Netns): Entry {
  const key = netnsKey(ns);
  let entry = entries.get(key);
  if (!entry) {
    entry = { channel: runInNetns(ns, () => openChannel()), users: new Set() };
    entries.set(key, entry);
  }
  entry.users.add(ns);
  return entry;
}

/** The request channel bound to `ns` (internal: kernel modules talk through it). */
export const channel = (ns: Netns): Channel => entryFor(ns).channel;

/**
 * The `netlink` package's RtNetlinkSocket bound to `ns`, for operations netlib does
 * not wrap. It shares the socket netlib itself uses.
 */
export function rtnl(ns: Netns): RtNetlinkSocket {
  const entry = entryFor(ns);
  if (!entry.rt) {
    const { RtNetlinkSocket: Rt } = require('netlink/dist/rt/rt') as typeof import('netlink/dist/rt/rt');
    const nl = entry.channel.nl ?? (entry.evented ??= runInNetns(ns, () => openChannel(true))).nl;
    if (!nl) throw new Error('rtnl: an evented channel has no package socket'); // cannot happen: openChannel(true)
    entry.rt = new Rt(nl);
  }
  return entry.rt;
}

function closeEntry(key: string, entry: Entry): void {
  entries.delete(key);
  entry.channel.close();
  entry.evented?.close();
}

/** Closes every cached socket (pending requests fail). Later calls open new ones. */
export function closeAllSockets(): void {
  for (const [key, entry] of [...entries]) closeEntry(key, entry);
}

onNetnsClose((ns) => {
  for (const [key, entry] of entries) {
    if (entry.users.delete(ns) && entry.users.size === 0) closeEntry(key, entry);
  }
});
