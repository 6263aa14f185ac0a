/**
 * Hand-written protobuf encoding of the few pkg.cnirpc messages (cnirpc.proto) and of google.rpc.Status,
 * shared by coild (through @grpc/grpc-js's custom serializers) and the thin `coil` client (raw HTTP/2):
 * no code generation, no proto-loader, nothing to load at start-up.
 */

export interface CNIArgs {
  containerId: string;
  netns: string;
  ifname: string;
  args: Record<string, string>;
  path: string;
  stdinData: Buffer;
  ips: string[];
  interfaces: Record<string, boolean>;
}

export interface CNIErrorMsg {
  code: number;
  msg: string;
  details: string;
}

export const SERVICE = 'pkg.cnirpc.CNI';
export const CNI_ERROR_TYPE_URL = 'type.googleapis.com/pkg.cnirpc.CNIError';

class Writer {
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
  uint(field: number, v: number): this {
    if (v === 0) return this;
    this.varint(field << 3);
    this.varint(v);
    return this;
  }
  bool(field: number, v: boolean): this {
    return this.uint(field, v ? 1 : 0);
  }
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

type Field = { field: number; wire: number; value: number | Buffer };

function* fields(buf: Buffer): Generator<Field> {
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

const str = (v: number | Buffer): string => (Buffer.isBuffer(v) ? v.toString('utf8') : '');
const bytesOf = (v: number | Buffer): Buffer => (Buffer.isBuffer(v) ? v : Buffer.alloc(0));
const num = (v: number | Buffer): number => (typeof v === 'number' ? v : 0);

export function encodeCNIArgs(a: Partial<CNIArgs>): Buffer {
  const w = new Writer()
    .bytes(1, a.containerId ?? '')
    .bytes(2, a.netns ?? '')
    .bytes(3, a.ifname ?? '');
  for (const [k, v] of Object.entries(a.args ?? {})) w.bytes(4, new Writer().bytes(1, k).bytes(2, v).finish(), true);
  w.bytes(5, a.path ?? '').bytes(6, a.stdinData ?? Buffer.alloc(0));
  for (const ip of a.ips ?? []) w.bytes(7, ip, true);
  for (const [k, v] of Object.entries(a.interfaces ?? {})) w.bytes(8, new Writer().bytes(1, k).bool(2, v).finish(), true);
  return w.finish();
}

export function decodeCNIArgs(buf: Buffer): CNIArgs {
  const a: CNIArgs = { containerId: '', netns: '', ifname: '', args: {}, path: '', stdinData: Buffer.alloc(0), ips: [], interfaces: {} };
  for (const f of fields(buf)) {
    switch (f.field) {
      case 1:
        a.containerId = str(f.value);
        break;
      case 2:
        a.netns = str(f.value);
        break;
      case 3:
        a.ifname = str(f.value);
        break;
      case 4: {
        let k = '',
          v = '';
        for (const e of fields(bytesOf(f.value))) {
          if (e.field === 1) k = str(e.value);
          else if (e.field === 2) v = str(e.value);
        }
        a.args[k] = v;
        break;
      }
      case 5:
        a.path = str(f.value);
        break;
      case 6:
        a.stdinData = Buffer.from(bytesOf(f.value));
        break;
      case 7:
        a.ips.push(str(f.value));
        break;
      case 8: {
        let k = '',
          v = false;
        for (const e of fields(bytesOf(f.value))) {
          if (e.field === 1) k = str(e.value);
          else if (e.field === 2) v = num(e.value) !== 0;
        }
        a.interfaces[k] = v;
        break;
      }
      default:
        break;
    }
  }
  return a;
}

export const encodeAddResponse = (result: Buffer | string): Buffer => new Writer().bytes(1, result).finish();
export function decodeAddResponse(buf: Buffer): Buffer {
  for (const f of fields(buf)) if (f.field === 1) return Buffer.from(bytesOf(f.value));
  return Buffer.alloc(0);
}
export const encodeEmpty = (): Buffer => Buffer.alloc(0);

export const encodeCNIError = (e: CNIErrorMsg): Buffer => new Writer().uint(1, e.code).bytes(2, e.msg).bytes(3, e.details).finish();
export function decodeCNIError(buf: Buffer): CNIErrorMsg {
  const e: CNIErrorMsg = { code: 0, msg: '', details: '' };
  for (const f of fields(buf)) {
    if (f.field === 1) e.code = num(f.value);
    else if (f.field === 2) e.msg = str(f.value);
    else if (f.field === 3) e.details = str(f.value);
  }
  return e;
}

/** google.rpc.Status{code, message, details: [Any{type_url, value}]} carrying one CNIError. */
export function encodeStatusWithCNIError(grpcCode: number, message: string, e: CNIErrorMsg): Buffer {
  const any = new Writer().bytes(1, CNI_ERROR_TYPE_URL).bytes(2, encodeCNIError(e)).finish();
  return new Writer().uint(1, grpcCode).bytes(2, message).bytes(3, any, true).finish();
}

/** The CNIError inside a google.rpc.Status, if there is one. */
export function cniErrorFromStatus(buf: Buffer): CNIErrorMsg | undefined {
  for (const f of fields(buf)) {
    if (f.field !== 3) continue;
    let url = '';
    let value: Buffer = Buffer.alloc(0);
    for (const a of fields(bytesOf(f.value))) {
      if (a.field === 1) url = str(a.value);
      else if (a.field === 2) value = bytesOf(a.value);
    }
    if (url === CNI_ERROR_TYPE_URL) return decodeCNIError(value);
  }
  return undefined;
}

/** gRPC length-prefixed message framing (uncompressed). */
export function frame(msg: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(msg.length, 1);
  return Buffer.concat([head, msg]);
}
