/**
 * The request layer: interrupted dumps are retried, and errors carried by NLMSG_DONE
 * or NLMSG_ERROR reach the caller as NetlinkError.
 */
import { NetlinkError } from '../../src/errors';
import * as link from '../../src/link';
import { s32 } from '../../src/nl/attrs';
import { openChannel, type Channel, type Exchange } from '../../src/nl/channel';
import { runInNetns } from '../../src/netns';
import { channel } from '../../src/netns/sockets';
import { rejection, useNamespaces } from './fixture';

const t = useNamespaces();
const NLM_F_MULTI = 0x2;
const NLM_F_DUMP_INTR = 0x10;
const NLMSG_ERROR = 2;
const NLMSG_DONE = 3;

afterEach(() => jest.restoreAllMocks());

describe('dump retries', () => {
  test('an interrupted dump is run again', async () => {
    const ch = channel(t.ctr.ns);
    const real = ch.exchange.bind(ch);
    const spy = jest
      .spyOn(ch, 'exchange')
      .mockImplementationOnce(async (...args) => ({ ...(await real(...args)), interrupted: true }))
      .mockImplementationOnce(async (...args) => ({ ...(await real(...args)), interrupted: true }));
    const links = await link.list(t.ctr.ns);
    expect(links.map((l) => l.name)).toEqual(['lo']);
    expect(spy).toHaveBeenCalledTimes(3);
  });

  test('a dump interrupted every time fails with EINTR', async () => {
    const ch = channel(t.ctr.ns);
    const spy = jest.spyOn(ch, 'exchange').mockResolvedValue({ replies: [], interrupted: true } satisfies Exchange);
    const err = await rejection(link.list(t.ctr.ns));
    expect(err).toBeInstanceOf(NetlinkError);
    expect(err.errno).toBe('EINTR');
    expect(spy).toHaveBeenCalledTimes(5);
  });
});

describe('reply handling', () => {
  let ch: Channel & { handleMessages(msgs: unknown[], rinfo: unknown): void; send: (...a: unknown[]) => number };
  let seq: number;
  beforeEach(() => {
    ch = runInNetns(t.ctr.ns, () => openChannel(true)) as typeof ch; // the evented transport's reply handling
    // Capture the request instead of sending it: the test plays the kernel.
    jest.spyOn(ch, 'send').mockImplementation((...args: unknown[]) => {
      seq = (args[2] as { seq: number }).seq;
      return seq;
    });
  });
  afterEach(() => ch.close());

  const msg = (type: number, flags: number, data: Buffer): unknown => ({ type, flags, seq, port: 0, data });

  test('NLM_F_DUMP_INTR on the DONE message alone marks the dump interrupted', async () => {
    const p = ch.exchange(18, 0x300, Buffer.alloc(16));
    ch.handleMessages([msg(16, NLM_F_MULTI, Buffer.alloc(16)), msg(16, NLM_F_MULTI, Buffer.alloc(16))], { port: 0, groups: 0 });
    ch.handleMessages([msg(NLMSG_DONE, NLM_F_MULTI | NLM_F_DUMP_INTR, s32(0))], { port: 0, groups: 0 });
    const r = await p;
    expect(r.replies).toHaveLength(2);
    expect(r.interrupted).toBe(true);
  });

  test('a negative status in DONE is an error', async () => {
    const p = ch.exchange(18, 0x300, Buffer.alloc(16));
    ch.handleMessages([msg(16, NLM_F_MULTI, Buffer.alloc(16)), msg(NLMSG_DONE, NLM_F_MULTI, s32(-90))], { port: 0, groups: 0 });
    expect(await rejection(p)).toMatchObject({ errno: -90 });
  });

  test('an ACK ends a plain request; an error ends it with the errno', async () => {
    const ok = ch.exchange(16, 0, Buffer.alloc(16));
    ch.handleMessages([msg(NLMSG_ERROR, 0, Buffer.concat([s32(0), Buffer.alloc(16)]))], { port: 0, groups: 0 });
    expect(await ok).toEqual({ replies: [], interrupted: false });
    const failed = ch.exchange(16, 0, Buffer.alloc(16));
    ch.handleMessages([msg(NLMSG_ERROR, 0, Buffer.concat([s32(-17), Buffer.alloc(16)]))], { port: 0, groups: 0 });
    expect(await rejection(failed)).toMatchObject({ errno: -17 });
  });

  test('closing the socket fails pending requests instead of leaving them hanging', async () => {
    const p = ch.exchange(18, 0, Buffer.alloc(16));
    ch.close();
    expect(await rejection(p)).toMatchObject({ errno: -9 });
  });
});
