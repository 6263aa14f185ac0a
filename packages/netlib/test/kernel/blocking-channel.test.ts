/**
 * The blocking transport's own behaviour (the kernel suites run on it as well, see jest.config.js): it is what
 * a one-shot call gets, it skips answers to other requests, it fails cleanly once closed, and the package's
 * API (rtnl) still works beside it.
 */
import * as link from '../../src/link';
import { netnsAddon } from '../../src/native';
import { openChannel } from '../../src/nl/channel';
import { runInNetns } from '../../src/netns';
import { rtnl } from '../../src/netns/sockets';
import { allowBlockingSockets, blockingSocketsAllowed } from '../../src/unix/mode';
import { rejection, useNamespaces } from './fixture';

const t = useNamespaces();
const RTM_GETLINK = 18;
const NLM_F_DUMP = 0x300;
let before: boolean;

beforeEach(() => {
  before = blockingSocketsAllowed();
  allowBlockingSockets();
});
afterEach(() => allowBlockingSockets(before));

// struct ifinfomsg, all zero: every link.
const ifinfomsg = (): Buffer => Buffer.alloc(16);

test('a one-shot call gets a channel without the package socket; a daemon gets the package socket', () => {
  const blocking = runInNetns(t.ctr.ns, () => openChannel());
  expect(blocking.nl).toBeUndefined();
  blocking.close();
  allowBlockingSockets(false);
  const evented = runInNetns(t.ctr.ns, () => openChannel());
  expect(evented.nl).toBeDefined();
  evented.close();
});

test('a dump answers every link of the namespace it was opened in', async () => {
  await link.add(t.ctr.ns, { name: 'd0', kind: 'bridge' });
  const ch = runInNetns(t.ctr.ns, () => openChannel());
  try {
    const r = await ch.exchange(RTM_GETLINK, NLM_F_DUMP, ifinfomsg());
    expect(r.replies).toHaveLength(2); // lo and d0
    expect(r.interrupted).toBe(false);
  } finally {
    ch.close();
  }
});

test('an answer to another sequence number is skipped, not taken as the answer', async () => {
  const ch = runInNetns(t.ctr.ns, () => openChannel());
  try {
    // A request of sequence 9999 written behind the channel's back: the kernel queues its answer (ENODEV)
    // ahead of the next exchange's, as it would a late answer to a request that was given up.
    const stray = Buffer.alloc(32);
    stray.writeUInt32LE(32, 0);
    stray.writeUInt16LE(17, 4); // RTM_DELLINK
    stray.writeUInt16LE(0x5, 6); // REQUEST | ACK
    stray.writeUInt32LE(9999, 8);
    stray.writeInt32LE(987654, 20); // ifi_index of no link
    netnsAddon().sockWrite((ch as unknown as { fd: number }).fd, stray, 1000);
    const r = await ch.exchange(RTM_GETLINK, NLM_F_DUMP, ifinfomsg());
    expect(r.replies).toHaveLength(1); // lo
  } finally {
    ch.close();
  }
});

test('a kernel error rejects with its errno; a closed channel rejects with EBADF and closes once', async () => {
  const ch = runInNetns(t.ctr.ns, () => openChannel());
  const RTM_DELLINK = 17;
  const absent = ifinfomsg();
  absent.writeInt32LE(987654, 4); // ifi_index of no link
  expect(await rejection(ch.exchange(RTM_DELLINK, 0, absent))).toMatchObject({ errno: -19 }); // ENODEV
  ch.close();
  ch.close();
  expect(await rejection(ch.exchange(RTM_GETLINK, NLM_F_DUMP, ifinfomsg()))).toMatchObject({ errno: -9 });
});

test('rtnl() opens the package socket beside a blocking channel, in the same namespace', async () => {
  await link.add(t.ctr.ns, { name: 'd1', kind: 'bridge' });
  await link.get(t.ctr.ns, 'd1'); // the namespace's blocking channel exists first
  const links = await rtnl(t.ctr.ns).getLinks();
  expect(links.map((l) => l.attrs.ifname).sort()).toEqual(['d1', 'lo']);
});
