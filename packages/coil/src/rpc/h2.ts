/**
 * One gRPC unary call over a hand-framed HTTP/2 connection on a UNIX socket (RFC 9113), for the `coil`
 * binary: node:http2 alone costs ~19 ms of start-up on this machine, more than the whole call. Client
 * preface + SETTINGS + HEADERS + DATA go out in one write; the response is read frame by frame (SETTINGS
 * acknowledged, PING answered, HEADERS/CONTINUATION decoded with hpack.ts, DATA collected) until the
 * stream ends. One stream per connection. The request body is sent in frames of at most the peer's
 * SETTINGS_MAX_FRAME_SIZE, within its flow-control windows (a GC call can carry thousands of attachments);
 * the answers are far below our own 64 KiB window, so no WINDOW_UPDATE is ever sent.
 */
import { HpackDecoder, encodeHeaders } from './hpack';

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const T = { DATA: 0, HEADERS: 1, RST_STREAM: 3, SETTINGS: 4, PING: 6, GOAWAY: 7, WINDOW_UPDATE: 8, CONTINUATION: 9 } as const;
const SETTINGS_INITIAL_WINDOW_SIZE = 4;
const SETTINGS_MAX_FRAME_SIZE = 5;
const F = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const;

function frame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(stream, 5);
  return Buffer.concat([h, payload]);
}

export interface H2Response {
  headers: Record<string, string>;
  body: Buffer;
}

export class H2Error extends Error {
  constructor(
    message: string,
    readonly connect = false,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'H2Error';
  }
}

/** POSTs `body` to `path` on the server at `socketPath`; resolves with headers + trailers merged and the body. */
export function h2Post(
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
    const decoder = new HpackDecoder();
    const got: Record<string, string> = {};
    const data: Buffer[] = [];
    let buf: Buffer = Buffer.alloc(0);
    let block: Buffer[] = [];
    let blockEnds = false;
    let connected = false;
    let settled = false;
    const finish = (err?: Error): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      if (err) reject(err);
      else resolve({ headers: got, body: Buffer.concat(data) });
    };
    const timer = setTimeout(() => finish(new H2Error(`deadline of ${timeoutMs} ms exceeded`)), timeoutMs);
    sock.on('connect', () => {
      connected = true;
    });
    sock.on('error', (err) => finish(new H2Error(err.message, !connected, { cause: err })));
    sock.on('close', () => finish(new H2Error('connection closed before the response ended')));
    const request = encodeHeaders([[':method', 'POST'], [':scheme', 'http'], [':path', path], [':authority', 'localhost'], ...headers]);
    // Flow control (RFC 9113 6.9): both windows start at 65535; the stream's follows the peer's settings.
    let connWindow = 65535;
    let streamWindow = 65535;
    let maxFrame = 16384;
    let initialWindow = 65535;
    let sent = 0;
    const pump = (): void => {
      const out: Buffer[] = [];
      while (sent < body.length && connWindow > 0 && streamWindow > 0) {
        const n = Math.min(body.length - sent, maxFrame, connWindow, streamWindow);
        const last = sent + n === body.length;
        out.push(frame(T.DATA, last ? F.END_STREAM : 0, 1, body.subarray(sent, sent + n)));
        sent += n;
        connWindow -= n;
        streamWindow -= n;
      }
      if (out.length) sock.write(Buffer.concat(out));
    };
    sock.write(
      Buffer.concat([
        PREFACE,
        frame(T.SETTINGS, 0, 0),
        frame(T.HEADERS, body.length ? F.END_HEADERS : F.END_HEADERS | F.END_STREAM, 1, request),
      ]),
    );
    pump();
    sock.on('data', (chunk: Buffer) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      try {
        while (buf.length >= 9) {
          const len = buf.readUIntBE(0, 3);
          if (buf.length < 9 + len) break;
          const type = buf[3]!;
          const flags = buf[4]!;
          const stream = buf.readUInt32BE(5) & 0x7fffffff;
          let payload = buf.subarray(9, 9 + len);
          buf = buf.subarray(9 + len);
          if (type === T.SETTINGS) {
            if (flags & F.ACK) continue;
            for (let i = 0; i + 6 <= payload.length; i += 6) {
              const id = payload.readUInt16BE(i);
              const value = payload.readUInt32BE(i + 2);
              if (id === SETTINGS_INITIAL_WINDOW_SIZE) {
                streamWindow += value - initialWindow;
                initialWindow = value;
              } else if (id === SETTINGS_MAX_FRAME_SIZE) maxFrame = value;
            }
            sock.write(frame(T.SETTINGS, F.ACK, 0));
            pump();
          } else if (type === T.WINDOW_UPDATE) {
            const inc = payload.readUInt32BE(0) & 0x7fffffff;
            if (stream === 0) connWindow += inc;
            else if (stream === 1) streamWindow += inc;
            pump();
          } else if (type === T.PING) {
            if (!(flags & F.ACK)) sock.write(frame(T.PING, F.ACK, 0, payload));
          } else if (type === T.GOAWAY) {
            return finish(new H2Error(`server sent GOAWAY (error ${payload.length >= 8 ? payload.readUInt32BE(4) : '?'})`));
          } else if (stream !== 1) {
            continue;
          } else if (type === T.RST_STREAM) {
            return finish(new H2Error(`stream reset by the server (error ${payload.readUInt32BE(0)})`));
          } else if (type === T.DATA) {
            if (flags & F.PADDED) payload = payload.subarray(1, payload.length - payload[0]!);
            data.push(Buffer.from(payload));
            if (flags & F.END_STREAM) return finish();
          } else if (type === T.HEADERS || type === T.CONTINUATION) {
            if (type === T.HEADERS) {
              let start = 0;
              let end = payload.length;
              if (flags & F.PADDED) {
                end -= payload[0]!;
                start = 1;
              }
              if (flags & F.PRIORITY) start += 5;
              payload = payload.subarray(start, end);
              blockEnds = (flags & F.END_STREAM) !== 0;
              block = [];
            }
            block.push(Buffer.from(payload));
            if (flags & F.END_HEADERS) {
              for (const [k, v] of decoder.decode(Buffer.concat(block))) got[k] = v;
              if (blockEnds) return finish();
            }
          }
        }
      } catch (err) {
        finish(err as Error);
      }
    });
  });
}
