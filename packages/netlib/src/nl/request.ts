/**
 * rtnetlink requests as netlib's kernel modules use them: one call, errors already
 * described as NetlinkError(op, object, errno), dumps retried when interrupted.
 */
import type { Netns } from '../netns/handle';
import { channel } from '../netns/sockets';
import type { Reply } from './channel';
import { toNetlinkError } from './errors';
import { NetlinkError } from '../errors';

export type { Reply } from './channel';

/** Netlink header flags for requests. */
export const NLM_F = {
  DUMP: 0x300,
  REPLACE: 0x100,
  EXCL: 0x200,
  CREATE: 0x400,
  APPEND: 0x800,
} as const;

/** What failed, for the error message: `netlink: <op> <object>: <errno>`. */
export interface What {
  op: string;
  object: string;
}

/** Sends a request and returns the kernel's reply messages (none for a plain ACK). */
export async function request(ns: Netns, type: number, flags: number, body: Buffer, what: What): Promise<Reply[]> {
  try {
    return (await channel(ns).exchange(type, flags, body)).replies;
  } catch (err) {
    throw toNetlinkError(what.op, what.object, err);
  }
}

/** How often a dump the kernel flagged as inconsistent (NLM_F_DUMP_INTR) is restarted. */
const DUMP_ATTEMPTS = 5;

/**
 * Dumps a table. The kernel sets NLM_F_DUMP_INTR when the table changed while it was
 * being read (the result may miss or repeat entries); the dump is then restarted, up
 * to DUMP_ATTEMPTS times, after which it fails with EINTR.
 */
export async function dump(ns: Netns, type: number, body: Buffer, what: What): Promise<Reply[]> {
  const ch = channel(ns);
  return oneDumpAtATime(ch, () => dumpOn(ch, type, body, what));
}

/**
 * The kernel runs one dump per netlink socket at a time and answers EBUSY to a second
 * one started meanwhile. Plugins never overlap dumps (one call per process), but a
 * daemon serving many pods at once does: dumps on one socket wait their turn here.
 */
const dumpTails = new WeakMap<object, Promise<unknown>>();
function oneDumpAtATime<T>(ch: object, fn: () => Promise<T>): Promise<T> {
  const prev = dumpTails.get(ch) ?? Promise.resolve();
  const run = prev.then(fn, fn);
  dumpTails.set(
    ch,
    run.catch(() => undefined),
  );
  return run;
}

async function dumpOn(ch: ReturnType<typeof channel>, type: number, body: Buffer, what: What): Promise<Reply[]> {
  for (let attempt = 1; ; attempt++) {
    let result;
    try {
      result = await ch.exchange(type, NLM_F.DUMP, body);
    } catch (err) {
      throw toNetlinkError(what.op, what.object, err);
    }
    if (!result.interrupted) return result.replies;
    if (attempt >= DUMP_ATTEMPTS) throw new NetlinkError(what.op, what.object, 'EINTR');
  }
}
