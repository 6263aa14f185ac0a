/**
 * A NETLINK_ROUTE socket with a request/response layer that sees every message.
 *
 * The `netlink` package's NetlinkSocket.request() drops the NLMSG_DONE message of a
 * dump (where the kernel puts NLM_F_DUMP_INTR and late dump errors) and turns error
 * numbers into message strings. RouteChannel keeps the package's socket, framing and
 * sequence numbers but collects replies itself, so callers get the raw messages, the
 * errno as a number and whether a dump was interrupted.
 *
 * A channel is bound to the network namespace it was created in: create it inside
 * runInNetns (see netns/sockets.ts). It is unreferenced while idle, so an open
 * channel never keeps the process alive.
 */
import type { NetlinkSocket, NetlinkSendOptions } from 'netlink/dist/netlink';
import type { RawNetlinkSocket, MessageInfo } from 'netlink/dist/raw';
import type { NetlinkMessage } from 'netlink/dist/structs';
import { readS32, readU16, readU32 } from './attrs';
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
  /** The package's socket, for callers that want its own API (see rtnl()). */
  readonly nl: NetlinkSocket;
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

interface Pending {
  replies: Reply[];
  interrupted: boolean;
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
        this.pending.set(seq, { replies: [], interrupted: false, resolve, reject });
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
        if (m.flags & NLM_F_DUMP_INTR) p.interrupted = true;
        switch (m.type) {
          case NLMSG_NOOP:
            break;
          case NLMSG_ERROR: {
            const errno = m.data.length >= 4 ? readS32(m.data) : -ENOBUFS;
            this.finish(m.seq, errno === 0 ? undefined : new KernelErrno(errno));
            break;
          }
          case NLMSG_DONE: {
            // Since Linux 4.x the DONE payload carries the dump's final status.
            const errno = m.data.length >= 4 ? readS32(m.data) : 0;
            this.finish(m.seq, errno < 0 ? new KernelErrno(errno) : undefined);
            break;
          }
          case NLMSG_OVERRUN:
            this.finish(m.seq, new KernelErrno(-ENOBUFS));
            break;
          default:
            p.replies.push({ type: m.type, flags: m.flags, data: m.data });
        }
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
      else p.resolve({ replies: p.replies, interrupted: p.interrupted });
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

/** Opens a NETLINK_ROUTE channel in the calling thread's current network namespace. */
export function openChannel(): Channel {
  const { RawNetlinkSocket: Raw } = require('netlink/dist/raw') as typeof import('netlink/dist/raw');
  const Ctor = channelClass();
  return new Ctor(new Raw(NETLINK_ROUTE));
}
