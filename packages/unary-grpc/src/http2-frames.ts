/**
 * HTTP/2 frames (RFC 9113 section 4): the 9-byte header, the frame types and flags the unary client uses,
 * and a reader that cuts a byte stream into frames.
 */

export const FrameType = {
  DATA: 0,
  HEADERS: 1,
  RST_STREAM: 3,
  SETTINGS: 4,
  PING: 6,
  GOAWAY: 7,
  WINDOW_UPDATE: 8,
  CONTINUATION: 9,
} as const;

/** END_STREAM and ACK share a bit: which one it means depends on the frame type. */
export const FrameFlag = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const;

export const Setting = { INITIAL_WINDOW_SIZE: 4, MAX_FRAME_SIZE: 5 } as const;

/** Every flow-control window starts at this size (section 6.9.2); the largest a window may be. */
export const DEFAULT_WINDOW = 65_535;
export const MAX_WINDOW = 2 ** 31 - 1;
export const DEFAULT_MAX_FRAME = 16_384;

export const CLIENT_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export interface Frame {
  type: number;
  flags: number;
  stream: number;
  payload: Buffer;
}

export function encodeFrame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream, 5);
  return Buffer.concat([head, payload]);
}

export function encodeSettings(settings: [id: number, value: number][]): Buffer {
  const payload = Buffer.alloc(6 * settings.length);
  settings.forEach(([id, value], i) => {
    payload.writeUInt16BE(id, 6 * i);
    payload.writeUInt32BE(value, 6 * i + 2);
  });
  return encodeFrame(FrameType.SETTINGS, 0, 0, payload);
}

export function encodeWindowUpdate(stream: number, increment: number): Buffer {
  const payload = Buffer.alloc(4);
  payload.writeUInt32BE(increment);
  return encodeFrame(FrameType.WINDOW_UPDATE, 0, stream, payload);
}

/** The payload without its padding (PADDED: a length byte first, that many bytes last). */
export function unpad(f: Frame): Buffer {
  if (!(f.flags & FrameFlag.PADDED)) return f.payload;
  return f.payload.subarray(1, f.payload.length - f.payload[0]!);
}

/** Collects the bytes read from a connection and hands out each frame once it is whole. */
export class FrameReader {
  private pending: Buffer = Buffer.alloc(0);

  *push(chunk: Buffer): Generator<Frame> {
    this.pending = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    while (this.pending.length >= 9) {
      const length = this.pending.readUIntBE(0, 3);
      if (this.pending.length < 9 + length) return;
      const frame = {
        type: this.pending[3]!,
        flags: this.pending[4]!,
        stream: this.pending.readUInt32BE(5) & 0x7fffffff,
        payload: this.pending.subarray(9, 9 + length),
      };
      this.pending = this.pending.subarray(9 + length);
      yield frame;
    }
  }
}
