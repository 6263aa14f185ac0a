/**
 * Protobuf wire format (proto3, https://protobuf.dev/programming-guides/encoding/), the primitives each
 * family's hand-written message codec is made of: no code generation, no descriptor, nothing to load at
 * start-up. Integers are JavaScript numbers (exact to 2^53, as proto-loader's `longs: Number`).
 */

/** Builds one message field by field; zero values and empty strings are left out, as proto3 does. */
export class ProtoWriter {
  private readonly parts: Buffer[] = [];

  private varint(n: number): void {
    const bytes: number[] = [];
    let v = n;
    while (v > 0x7f) {
      bytes.push((v & 0x7f) | 0x80);
      v = Math.floor(v / 128);
    }
    bytes.push(v);
    this.parts.push(Buffer.from(bytes));
  }

  /** A varint field (uint32, uint64, an enum's number). */
  uint(field: number, v: number): this {
    if (v === 0) return this;
    this.varint(field << 3);
    this.varint(v);
    return this;
  }

  bool(field: number, v: boolean): this {
    return this.uint(field, v ? 1 : 0);
  }

  /** A length-delimited field: string, bytes or an encoded message. `always`: an element of a repeated field or map. */
  bytes(field: number, b: Buffer | string, always = false): this {
    const buf = typeof b === 'string' ? Buffer.from(b, 'utf8') : b;
    if (buf.length === 0 && !always) return this;
    this.varint((field << 3) | 2);
    this.varint(buf.length);
    this.parts.push(buf);
    return this;
  }

  finish(): Buffer {
    return Buffer.concat(this.parts);
  }
}

/** One field as read: a varint's number, or a length-delimited field's bytes (a view into the message). */
export interface ProtoField {
  field: number;
  wire: number;
  value: number | Buffer;
}

/** The fields of one message in wire order; fixed32/fixed64 fields are skipped (no message here has one). */
export function* protoFields(buf: Buffer): Generator<ProtoField> {
  let pos = 0;
  const varint = (): number => {
    let result = 0;
    let mult = 1;
    for (;;) {
      if (pos >= buf.length) throw new RangeError('protobuf: truncated varint');
      const b = buf[pos++]!;
      result += (b & 0x7f) * mult;
      if (b < 0x80) return result;
      mult *= 128;
      if (mult > 2 ** 63) throw new RangeError('protobuf: varint too long');
    }
  };
  while (pos < buf.length) {
    const key = varint();
    const field = Math.floor(key / 8);
    const wire = key & 7;
    if (wire === 0) yield { field, wire, value: varint() };
    else if (wire === 2) {
      const len = varint();
      if (pos + len > buf.length) throw new RangeError('protobuf: truncated field');
      yield { field, wire, value: buf.subarray(pos, pos + len) };
      pos += len;
    } else if (wire === 1) pos += 8;
    else if (wire === 5) pos += 4;
    else throw new RangeError(`protobuf: unsupported wire type ${wire}`);
  }
}

/** A field's value read as a string, bytes, number or bool: the proto3 default when the wire type differs. */
export const protoString = (v: number | Buffer): string => (Buffer.isBuffer(v) ? v.toString('utf8') : '');
export const protoBytes = (v: number | Buffer): Buffer => (Buffer.isBuffer(v) ? v : Buffer.alloc(0));
export const protoNumber = (v: number | Buffer): number => (typeof v === 'number' ? v : 0);
export const protoBool = (v: number | Buffer): boolean => protoNumber(v) !== 0;
