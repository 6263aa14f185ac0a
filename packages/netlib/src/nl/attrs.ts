/**
 * Netlink attributes (TLVs): `len u16, type u16, payload`, each padded to 4 bytes.
 *
 * netlib encodes and decodes rtnetlink messages itself instead of going through the
 * `netlink` package's generated structs: those parse every attribute of every message
 * (link stats, VF lists...) and cost load time, while a CNI plugin needs a handful of
 * fields. Integers are in host byte order, as the kernel expects; addresses and ports
 * are in network order inside their byte buffers.
 */
import { endianness } from 'node:os';

const LE = endianness() === 'LE';
const HEADER = 4;
/** Attribute flag bits carried in the type field (NLA_F_NESTED, NLA_F_NET_BYTEORDER). */
const TYPE_MASK = 0x3fff;

export const align4 = (n: number): number => (n + 3) & ~3;

export function u8(v: number): Buffer {
  return Buffer.from([v & 0xff]);
}

/*
 * The hot 16- and 32-bit fields are stored and read byte by byte: Buffer's writeUInt16LE and
 * friends validate every call and compile Node's checks on first use, which a per-pod process
 * (one ADD, a few dozen messages) paid for in every call (docs/build.md, "where a CNI call's time goes").
 */
function put16(b: Buffer, off: number, v: number): void {
  if (off < 0 || off + 2 > b.length) throw new RangeError(`netlink: 16-bit field at ${off} beyond ${b.length} bytes`);
  b[off + (LE ? 0 : 1)] = v & 0xff;
  b[off + (LE ? 1 : 0)] = (v >>> 8) & 0xff;
}

function put32(b: Buffer, off: number, v: number): void {
  if (off < 0 || off + 4 > b.length) throw new RangeError(`netlink: 32-bit field at ${off} beyond ${b.length} bytes`);
  for (let i = 0; i < 4; i++) b[off + (LE ? i : 3 - i)] = (v >>> (8 * i)) & 0xff;
}

export function u16(v: number): Buffer {
  const b = Buffer.alloc(2);
  put16(b, 0, v);
  return b;
}

export function u32(v: number): Buffer {
  const b = Buffer.alloc(4);
  put32(b, 0, v >>> 0);
  return b;
}

export function s32(v: number): Buffer {
  const b = Buffer.alloc(4);
  if (LE) b.writeInt32LE(v);
  else b.writeInt32BE(v);
  return b;
}

export function u64(v: bigint): Buffer {
  const b = Buffer.alloc(8);
  if (LE) b.writeBigUInt64LE(v);
  else b.writeBigUInt64BE(v);
  return b;
}

/** A NUL-terminated string, as the kernel wants names and kinds. */
export function str(s: string): Buffer {
  return Buffer.from(`${s}\0`, 'utf8');
}

/** One attribute: header, payload, zero padding up to the next 4-byte boundary. */
export function attr(type: number, payload: Buffer | readonly Buffer[] = []): Buffer {
  const data = Buffer.isBuffer(payload) ? payload : Buffer.concat(payload);
  const len = HEADER + data.length;
  const out = Buffer.alloc(align4(len));
  put16(out, 0, len);
  put16(out, 2, type);
  out.set(data, HEADER);
  return out;
}

/** A nested attribute holding `children` (already-encoded attributes). */
export const nest = (type: number, ...children: Buffer[]): Buffer => attr(type, children);

// Readers take a buffer and an offset, in host order.
export function readU16(b: Buffer, off = 0): number {
  if (off + 2 > b.length) throw new RangeError(`netlink: 16-bit field at ${off} beyond ${b.length} bytes`);
  return LE ? b[off]! | (b[off + 1]! << 8) : (b[off]! << 8) | b[off + 1]!;
}
export function readU32(b: Buffer, off = 0): number {
  if (off + 4 > b.length) throw new RangeError(`netlink: 32-bit field at ${off} beyond ${b.length} bytes`);
  return LE
    ? (b[off]! | (b[off + 1]! << 8) | (b[off + 2]! << 16) | (b[off + 3]! << 24)) >>> 0
    : ((b[off]! << 24) | (b[off + 1]! << 16) | (b[off + 2]! << 8) | b[off + 3]!) >>> 0;
}
export const readS32 = (b: Buffer, off = 0): number => (LE ? b.readInt32LE(off) : b.readInt32BE(off));
export const readU64 = (b: Buffer, off = 0): bigint => (LE ? b.readBigUInt64LE(off) : b.readBigUInt64BE(off));

/** Writes into an existing buffer (for fixed headers). */
export function writeU16(b: Buffer, v: number, off: number): void {
  put16(b, off, v);
}
export function writeS16(b: Buffer, v: number, off: number): void {
  if (LE) b.writeInt16LE(v, off);
  else b.writeInt16BE(v, off);
}
export function writeU32(b: Buffer, v: number, off: number): void {
  put32(b, off, v >>> 0);
}
export function writeS32(b: Buffer, v: number, off: number): void {
  if (LE) b.writeInt32LE(v, off);
  else b.writeInt32BE(v, off);
}

/**
 * Splits an attribute stream into type -> payload. The first occurrence of a type
 * wins (rtnetlink objects carry each attribute once); use `attrList` when a type
 * repeats. Truncated trailing bytes are ignored rather than thrown on, as the
 * kernel never sends them and a lookup must not fail on a future extension.
 */
export function parseAttrs(b: Buffer, offset = 0): Map<number, Buffer> {
  const out = new Map<number, Buffer>();
  for (const [type, payload] of attrList(b, offset)) if (!out.has(type)) out.set(type, payload);
  return out;
}

export function attrList(b: Buffer, offset = 0): Array<[number, Buffer]> {
  const out: Array<[number, Buffer]> = [];
  let off = offset;
  while (off + HEADER <= b.length) {
    const len = readU16(b, off);
    if (len < HEADER || off + len > b.length) break;
    out.push([readU16(b, off + 2) & TYPE_MASK, b.subarray(off + HEADER, off + len)]);
    off += align4(len);
  }
  return out;
}

/** A string attribute without its trailing NUL. */
export function readStr(b: Buffer): string {
  const end = b.indexOf(0);
  return b.toString('utf8', 0, end < 0 ? b.length : end);
}
