/**
 * A NETLINK_ROUTE socket with a request/response layer that sees every message.
 *
 * Two transports, one protocol layer (`Collector`):
 * - evented (daemons, tests): the `netlink` package's socket on the event loop. Its
 *   NetlinkSocket.request() drops the NLMSG_DONE message of a dump (where the kernel puts
 *   NLM_F_DUMP_INTR and late dump errors) and turns error numbers into message strings, so
 *   RouteChannel keeps the package's socket, framing and sequence numbers but collects
 *   replies itself. It is unreferenced while idle, so it never keeps the process alive.
 * - blocking (a one-shot CNI call, see unix/mode.ts): a socket of netlib's addon, each
 *   request written and its answer read in blocking system calls. A per-pod call makes
 *   10-35 exchanges; each evented one costs event-loop turns and the package's JavaScript,
 *   run once and cold (docs/build.md, "A blocking netlink socket").
 * Either way callers get the raw messages, the errno as a number and whether a dump was
 * interrupted.
 *
 * A channel is bound to the network namespace it was created in: create it inside
 * runInNetns (see netns/sockets.ts).
 */
import { closeSync } from 'node:fs';
import type { NetlinkSocket, NetlinkSendOptions } from 'netlink/dist/netlink';
import type { RawNetlinkSocket, MessageInfo } from 'netlink/dist/raw';
import type { NetlinkMessage } from 'netlink/dist/structs';
import { netnsAddon } from '../native';
import { blockingSocketsAllowed } from '../unix/mode';
import { readS32, readU16, readU32, writeU16, writeU32 } from './attrs';
import { KernelErrno } from './errors';

export interface Reply {
  type: number;
  flags: number;
  data: Buffer;
}

export interface Exchange {
  /** Data messages, in order (ACK / DONE stripped). */
  replies: Reply[];
  /** The kernel flagged the dump as inconsistent (NLM_F_DUMP_INTR): retry it. */
  interrupted: boolean;
}

export interface Channel {
  /** Sends one request (REQUEST|ACK added to `flags`) and collects its answer. */
  exchange(type: number, flags: number, body: Buffer): Promise<Exchange>;
  /** The package's socket, for callers that want its own API (see rtnl()); absent on a blocking channel. */
  readonly nl?: NetlinkSocket;
  close(): void;
}

const NETLINK_ROUTE = 0;
const NLM_F_REQUEST = 0x1;
const NLM_F_ACK = 0x4;
const NLM_F_DUMP_INTR = 0x10;
const NLMSG_NOOP = 1;
const NLMSG_ERROR = 2;
const NLMSG_DONE = 3;
const NLMSG_OVERRUN = 4;
const ENOBUFS = 105;

/** The answer to one request as it arrives: `take` each message of its sequence number until it says done. */
class Collector {
  readonly replies: Reply[] = [];
  interrupted = false;
  /** Set once the answer is complete: `{}` on success, `{ error }` on failure. */
  outcome: { error?: unknown } | undefined;

  take(m: NetlinkMessage): void {
    if (m.flags & NLM_F_DUMP_INTR) this.interrupted = true;
    switch (m.type) {
      case NLMSG_NOOP:
        break;
      case NLMSG_ERROR: {
        const errno = m.data.length >= 4 ? readS32(m.data) : -ENOBUFS;
        this.outcome = errno === 0 ? {} : { error: new KernelErrno(errno) };
        break;
      }
      case NLMSG_DONE: {
        // Since Linux 4.x the DONE payload carries the dump's final status.
        const errno = m.data.length >= 4 ? readS32(m.data) : 0;
        this.outcome = errno < 0 ? { error: new KernelErrno(errno) } : {};
        break;
      }
      case NLMSG_OVERRUN:
        this.outcome = { error: new KernelErrno(-ENOBUFS) };
        break;
      default:
        this.replies.push({ type: m.type, flags: m.flags, data: m.data });
    }
  }

  result(): Exchange {
    return { replies: this.replies, interrupted: this.interrupted };
  }
}

interface Pending {
  answer: Collector;
  resolve(x: Exchange): void;
  reject(e: unknown): void;
}

type ChannelCtor = new (raw: RawNetlinkSocket) => NetlinkSocket & Channel;
let ctor: ChannelCtor | undefined;

/**
 * Defined on first use: requiring the `netlink` package loads its native binding,
 * which a plugin answering VERSION should not pay for.
 */
function channelClass(): ChannelCtor {
  if (ctor) return ctor;
  const { NetlinkSocket: Base } = require('netlink/dist/netlink') as typeof import('netlink/dist/netlink');

  class RouteChannel extends Base implements Channel {
    private readonly pending = new Map<number, Pending>();
    private closed = false;

    constructor(raw: RawNetlinkSocket) {
      super(raw, { ref: false });
      // Datagrams are split into messages here rather than by the package's generic struct reader: a
      // per-pod call receives a few hundred messages once each, and that reader ran cold on every one.
      this.socket.removeAllListeners('message');
      this.socket.on('message', (msg: Buffer, rinfo: MessageInfo) => this.handleMessages(splitMessages(msg), rinfo));
      // Without a listener an 'error' event would throw out of the event loop.
      this.on('error', (err) => this.failAll(err));
      this.on('close', () => {
        this.closed = true;
        this.failAll(new KernelErrno(-9 /* EBADF: socket closed */));
      });
    }

    /** Idempotent, unlike the package's close(). */
    override close(): void {
      if (!this.closed) super.close();
    }

    get nl(): NetlinkSocket {
      return this;
    }

    exchange(type: number, flags: number, body: Buffer): Promise<Exchange> {
      return new Promise<Exchange>((resolve, reject) => {
        const seq = this.generateSeq();
        if (this.pending.size === 0) this.socket.ref(); // keep the process alive until answered
        this.pending.set(seq, { answer: new Collector(), resolve, reject });
        const opts: NetlinkSendOptions = { flags: flags | NLM_F_REQUEST | NLM_F_ACK, seq };
        this.send(type, body, opts, (err) => {
          if (err) this.finish(seq, err);
        });
      });
    }

    protected override handleMessages(msgs: NetlinkMessage[], rinfo: MessageInfo): void {
      const others: NetlinkMessage[] = [];
      for (const m of msgs) {
        const p = this.pending.get(m.seq);
        if (!p) {
          others.push(m);
          continue;
        }
        p.answer.take(m);
        if (p.answer.outcome) this.finish(m.seq, p.answer.outcome.error);
      }
      // Anything not ours (notifications, requests sent through the package's own API).
      if (others.length) super.handleMessages(others, rinfo);
    }

    // The package's own requests unreference the socket when they end; ours may still be waiting.
    protected override dropRef(seq: number): void {
      super.dropRef(seq);
      if (this.pending.size) this.socket.ref();
    }

    private finish(seq: number, err: unknown): void {
      const p = this.pending.get(seq);
      if (!p) return;
      this.pending.delete(seq);
      if (this.pending.size === 0 && !this.requests.size && !this.closed) this.socket.unref();
      if (err) p.reject(err);
      else p.resolve(p.answer.result());
    }

    private failAll(err: unknown): void {
      for (const seq of [...this.pending.keys()]) this.finish(seq, err);
    }
  }
  ctor = RouteChannel;
  return ctor;
}

const NLMSG_HDRLEN = 16;

/** struct nlmsghdr { u32 len; u16 type; u16 flags; u32 seq; u32 pid; } then the payload, each message 4-aligned. */
function splitMessages(b: Buffer): NetlinkMessage[] {
  const out: NetlinkMessage[] = [];
  for (let off = 0; off + NLMSG_HDRLEN <= b.length;) {
    const len = readU32(b, off);
    if (len < NLMSG_HDRLEN || off + len > b.length) break;
    out.push({
      type: readU16(b, off + 4),
      flags: readU16(b, off + 6),
      seq: readU32(b, off + 8),
      port: readU32(b, off + 12),
      data: b.subarray(off + NLMSG_HDRLEN, off + len),
    });
    off += (len + 3) & ~3;
  }
  return out;
}

/** The kernel answers at once; a missing answer is a bug, and a CNI call must not hang on it. */
const BLOCKING_TIMEOUT_MS = 10_000;

/** Requests written and answers read in blocking system calls of netlib's addon: no event-loop turn. */
class BlockingChannel implements Channel {
  private fd: number | undefined;
  private seq = 1;

  constructor(private readonly addon = netnsAddon()) {
    this.fd = addon.netlinkOpen(NETLINK_ROUTE);
  }

  exchange(type: number, flags: number, body: Buffer): Promise<Exchange> {
    try {
      return Promise.resolve(this.exchangeNow(type, flags, body));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  close(): void {
    if (this.fd === undefined) return;
    closeSync(this.fd);
    this.fd = undefined;
  }

  private exchangeNow(type: number, flags: number, body: Buffer): Exchange {
    if (this.fd === undefined) throw new KernelErrno(-9 /* EBADF: socket closed */);
    const seq = this.seq++;
    this.addon.sockWrite(this.fd, frame(type, flags | NLM_F_REQUEST | NLM_F_ACK, seq, body), BLOCKING_TIMEOUT_MS);
    const answer = new Collector();
    while (!answer.outcome) {
      // Messages of another sequence number are late answers to an earlier request that failed: skipped.
      for (const m of splitMessages(this.addon.netlinkRecv(this.fd, BLOCKING_TIMEOUT_MS))) if (m.seq === seq) answer.take(m);
    }
    if (answer.outcome.error) throw answer.outcome.error;
    return answer.result();
  }
}

/** One request: struct nlmsghdr in host order (port 0: the kernel fills in ours), then the body. */
function frame(type: number, flags: number, seq: number, body: Buffer): Buffer {
  const msg = Buffer.alloc(NLMSG_HDRLEN + body.length);
  writeU32(msg, msg.length, 0);
  writeU16(msg, type, 4);
  writeU16(msg, flags, 6);
  writeU32(msg, seq, 8);
  body.copy(msg, NLMSG_HDRLEN);
  return msg;
}

/**
 * Opens a NETLINK_ROUTE channel in the calling thread's current network namespace: blocking in a one-shot
 * CNI call, evented otherwise (or when `evented` is asked, for the package's own API).
 */
export function openChannel(evented = false): Channel {
  if (!evented && blockingSocketsAllowed()) return new BlockingChannel();
  const { RawNetlinkSocket: Raw } = require('netlink/dist/raw') as typeof import('netlink/dist/raw');
  const Ctor = channelClass();
  return new Ctor(new Raw(NETLINK_ROUTE));
}
