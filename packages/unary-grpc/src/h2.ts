/**
 * One POST over a hand-framed HTTP/2 connection on a UNIX socket (RFC 9113), one stream per connection:
 * node:http2 alone costs ~19 ms of start-up, more than a whole call to a node daemon (docs/build.md).
 * In a plugin binary (netlib's `blockingSocketsAllowed()`) the exchange runs on a blocking socket, since
 * node:net and the event loop cost such a call more than the rest of it; elsewhere (daemons, in-process
 * tests, whose server may be in the same process) on node:net.
 * The steps: connect; write the client preface, SETTINGS, HEADERS and the first DATA in one write; read
 * frames (SETTINGS acknowledged, PING answered, WINDOW_UPDATE releasing more of the body, a GOAWAY that still
 * covers our stream waited out, HEADERS and CONTINUATION decoded with hpack.ts, DATA collected) until the
 * stream ends, fails or the deadline passes.
 * The request body goes out in frames within the peer's SETTINGS_MAX_FRAME_SIZE and flow-control windows;
 * our own receive windows are opened to the maximum at once, so no WINDOW_UPDATE is ever sent.
 */
import type { Socket } from 'node:net';
import { BlockingUnixStream, UnixStreamError, blockingSocketsAllowed } from '@cnikit/netlib/unix';
import { HpackDecoder, encodeHeaders } from './hpack';
import {
  CLIENT_PREFACE,
  DEFAULT_MAX_FRAME,
  DEFAULT_WINDOW,
  FrameFlag,
  FrameReader,
  FrameType,
  MAX_WINDOW,
  Setting,
  encodeFrame,
  encodeSettings,
  encodeWindowUpdate,
  unpad,
  type Frame,
} from './http2-frames';

const STREAM = 1;

export interface H2Response {
  /** Response headers and trailers in one record (a trailers-only response has a single block). */
  headers: Record<string, string>;
  body: Buffer;
}

/** Why the exchange failed on our side: no connection, the deadline, or the connection failing during it. */
export type H2Failure = 'connect' | 'deadline' | 'transport';

export class H2Error extends Error {
  constructor(
    message: string,
    readonly failure: H2Failure,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'H2Error';
  }
}

/** POSTs `body` to `path` on the server at `socketPath`; resolves once the response stream has ended. */
export async function h2Post(
  socketPath: string,
  path: string,
  headers: [string, string][],
  body: Buffer,
  timeoutMs: number,
): Promise<H2Response> {
  if (blockingSocketsAllowed()) return h2PostBlocking(socketPath, path, headers, body, timeoutMs);
  return h2PostEvented(socketPath, path, headers, body, timeoutMs);
}

/** The exchange on a blocking socket: write, then read frames until the stream ends; one deadline for all. */
function h2PostBlocking(socketPath: string, path: string, headers: [string, string][], body: Buffer, timeoutMs: number): H2Response {
  let outcome: { err?: Error; response?: H2Response } | undefined;
  let stream: BlockingUnixStream | undefined;
  try {
    stream = BlockingUnixStream.connect(socketPath, timeoutMs);
    const s = stream;
    const exchange = new Exchange(
      body,
      (b) => s.write(b),
      (err, response) => (outcome ??= { err, response }),
    );
    s.write(openingFrames(path, headers, body.length === 0));
    exchange.sendBody();
    const reader = new FrameReader();
    while (!outcome) {
      const chunk = s.read();
      if (chunk.length === 0) throw new H2Error(CLOSED_EARLY, 'transport');
      for (const f of reader.push(chunk)) if (!outcome) exchange.onFrame(f);
    }
  } catch (err) {
    if (!(err instanceof UnixStreamError)) throw err;
    throw new H2Error(blockingMessage(err, timeoutMs), err.failure, { cause: err });
  } finally {
    stream?.close();
  }
  if (outcome.err) throw outcome.err;
  return outcome.response!;
}

const CLOSED_EARLY = 'connection closed before the response ended';

/** A peer that hung up reads as an end of stream, or as ECONNRESET / EPIPE when it left our bytes unread. */
const hungUp = (code: string | undefined): boolean => code === 'ECONNRESET' || code === 'EPIPE';

function blockingMessage(err: UnixStreamError, timeoutMs: number): string {
  if (err.failure === 'deadline') return `deadline of ${timeoutMs} ms exceeded`;
  return err.failure === 'transport' && hungUp(err.code) ? CLOSED_EARLY : err.message;
}

/** The exchange on node:net, for processes whose event loop serves others meanwhile. */
function h2PostEvented(
  socketPath: string,
  path: string,
  headers: [string, string][],
  body: Buffer,
  timeoutMs: number,
): Promise<H2Response> {
  return new Promise((resolve, reject) => {
    // node:net (with node:stream) costs ~2.5 ms to load: required here, a VERSION call never pays it.
    const { connect } = require('node:net') as typeof import('node:net');
    const sock = connect(socketPath);
    let settled = false;
    const finish = (err?: Error, response?: H2Response): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      if (err) reject(err);
      else resolve(response!);
    };
    const timer = setTimeout(() => finish(new H2Error(`deadline of ${timeoutMs} ms exceeded`, 'deadline')), timeoutMs);
    watchSocket(sock, finish);
    const exchange = new Exchange(body, (b) => sock.write(b), finish);
    sock.write(openingFrames(path, headers, body.length === 0));
    exchange.sendBody();
    const reader = new FrameReader();
    sock.on('data', (chunk: Buffer) => {
      try {
        for (const f of reader.push(chunk)) if (!settled) exchange.onFrame(f);
      } catch (err) {
        finish(err as Error);
      }
    });
  });
}

/** A socket error before the connection is up is a connect failure; any later error or close is the transport's. */
function watchSocket(sock: Socket, finish: (err: Error) => void): void {
  let connected = false;
  sock.on('connect', () => {
    connected = true;
  });
  sock.on('error', (err: NodeJS.ErrnoException) => {
    const message = connected && hungUp(err.code) ? CLOSED_EARLY : err.message;
    finish(new H2Error(message, connected ? 'transport' : 'connect', { cause: err }));
  });
  sock.on('close', () => finish(new H2Error(CLOSED_EARLY, 'transport')));
}

/** Preface, our SETTINGS (windows at the maximum), the connection's window likewise, the request HEADERS. */
function openingFrames(path: string, headers: [string, string][], noBody: boolean): Buffer {
  const block = encodeHeaders([[':method', 'POST'], [':scheme', 'http'], [':path', path], [':authority', 'localhost'], ...headers]);
  return Buffer.concat([
    CLIENT_PREFACE,
    encodeSettings([[Setting.INITIAL_WINDOW_SIZE, MAX_WINDOW]]),
    encodeWindowUpdate(0, MAX_WINDOW - DEFAULT_WINDOW),
    encodeFrame(FrameType.HEADERS, FrameFlag.END_HEADERS | (noBody ? FrameFlag.END_STREAM : 0), STREAM, block),
  ]);
}

/** The request body in DATA frames, as far as the peer's frame size and windows allow (RFC 9113 6.9). */
class BodySender {
  private connWindow = DEFAULT_WINDOW;
  private streamWindow = DEFAULT_WINDOW;
  private initialWindow = DEFAULT_WINDOW;
  private maxFrame = DEFAULT_MAX_FRAME;
  private sent = 0;

  constructor(
    private readonly body: Buffer,
    private readonly write: (b: Buffer) => void,
  ) {}

  /** The peer's SETTINGS: a new initial window moves the stream's window by the difference (6.9.2). */
  applySettings(payload: Buffer): void {
    for (let i = 0; i + 6 <= payload.length; i += 6) {
      const id = payload.readUInt16BE(i);
      const value = payload.readUInt32BE(i + 2);
      if (id === Setting.INITIAL_WINDOW_SIZE) {
        this.streamWindow += value - this.initialWindow;
        this.initialWindow = value;
      } else if (id === Setting.MAX_FRAME_SIZE) this.maxFrame = value;
    }
  }

  windowUpdate(stream: number, increment: number): void {
    if (stream === 0) this.connWindow += increment;
    else if (stream === STREAM) this.streamWindow += increment;
  }

  send(): void {
    const out: Buffer[] = [];
    while (this.sent < this.body.length && this.connWindow > 0 && this.streamWindow > 0) {
      const n = Math.min(this.body.length - this.sent, this.maxFrame, this.connWindow, this.streamWindow);
      const last = this.sent + n === this.body.length;
      out.push(encodeFrame(FrameType.DATA, last ? FrameFlag.END_STREAM : 0, STREAM, this.body.subarray(this.sent, this.sent + n)));
      this.sent += n;
      this.connWindow -= n;
      this.streamWindow -= n;
    }
    if (out.length) this.write(Buffer.concat(out));
  }
}

/** What the frames read so far say: connection-level frames answered, the stream's headers and data kept. */
class Exchange {
  private readonly sender: BodySender;
  private readonly decoder = new HpackDecoder();
  private readonly headers: Record<string, string> = {};
  private readonly data: Buffer[] = [];
  private headerBlock: Buffer[] = [];
  private blockEndsStream = false;

  constructor(
    body: Buffer,
    private readonly write: (b: Buffer) => void,
    private readonly finish: (err?: Error, response?: H2Response) => void,
  ) {
    this.sender = new BodySender(body, write);
  }

  sendBody(): void {
    this.sender.send();
  }

  onFrame(f: Frame): void {
    switch (f.type) {
      case FrameType.SETTINGS:
        if (f.flags & FrameFlag.ACK) return;
        this.sender.applySettings(f.payload);
        this.write(encodeFrame(FrameType.SETTINGS, FrameFlag.ACK, 0));
        return this.sender.send();
      case FrameType.WINDOW_UPDATE:
        this.sender.windowUpdate(f.stream, f.payload.readUInt32BE(0) & 0x7fffffff);
        return this.sender.send();
      case FrameType.PING:
        if (!(f.flags & FrameFlag.ACK)) this.write(encodeFrame(FrameType.PING, FrameFlag.ACK, 0, f.payload));
        return;
      case FrameType.GOAWAY:
        // a server going away still finishes the streams up to its last stream id (RFC 9113 6.8): ours among them, we wait
        if (f.payload.length >= 8 && (f.payload.readUInt32BE(0) & 0x7fffffff) >= STREAM) return;
        return this.fail(`server sent GOAWAY (error ${f.payload.length >= 8 ? f.payload.readUInt32BE(4) : '?'})`);
    }
    if (f.stream === STREAM) this.onStreamFrame(f);
  }

  private onStreamFrame(f: Frame): void {
    if (f.type === FrameType.RST_STREAM) return this.fail(`stream reset by the server (error ${f.payload.readUInt32BE(0)})`);
    if (f.type === FrameType.DATA) {
      this.data.push(Buffer.from(unpad(f)));
      if (f.flags & FrameFlag.END_STREAM) this.end();
    } else if (f.type === FrameType.HEADERS) {
      const fragment = unpad(f).subarray(f.flags & FrameFlag.PRIORITY ? 5 : 0);
      this.blockEndsStream = (f.flags & FrameFlag.END_STREAM) !== 0;
      this.headerBlock = [];
      this.onHeaderFragment(fragment, f.flags);
    } else if (f.type === FrameType.CONTINUATION) this.onHeaderFragment(f.payload, f.flags);
  }

  /** A header block may span HEADERS and CONTINUATION frames: decoded once END_HEADERS closes it. */
  private onHeaderFragment(fragment: Buffer, flags: number): void {
    this.headerBlock.push(Buffer.from(fragment));
    if (!(flags & FrameFlag.END_HEADERS)) return;
    for (const [name, value] of this.decoder.decode(Buffer.concat(this.headerBlock))) this.headers[name] = value;
    if (this.blockEndsStream) this.end();
  }

  private end(): void {
    this.finish(undefined, { headers: this.headers, body: Buffer.concat(this.data) });
  }

  private fail(message: string): void {
    this.finish(new H2Error(message, 'transport'));
  }
}
