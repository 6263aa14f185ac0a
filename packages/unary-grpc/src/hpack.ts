/**
 * The HPACK (RFC 7541) subset the unary client needs: encoding request headers as literals (no Huffman, no dynamic
 * table), decoding response headers completely (static + dynamic table, Huffman for printable ASCII, which
 * is all gRPC response headers carry: status digits, percent-encoded messages, base64 details).
 */
import { HUFFMAN_CODES } from './huffman-table';

// RFC 7541 Appendix A.
const STATIC: readonly (readonly [string, string])[] = [
  ['', ''],
  [':authority', ''],
  [':method', 'GET'],
  [':method', 'POST'],
  [':path', '/'],
  [':path', '/index.html'],
  [':scheme', 'http'],
  [':scheme', 'https'],
  [':status', '200'],
  [':status', '204'],
  [':status', '206'],
  [':status', '304'],
  [':status', '400'],
  [':status', '404'],
  [':status', '500'],
  ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'],
  ['accept-language', ''],
  ['accept-ranges', ''],
  ['accept', ''],
  ['access-control-allow-origin', ''],
  ['age', ''],
  ['allow', ''],
  ['authorization', ''],
  ['cache-control', ''],
  ['content-disposition', ''],
  ['content-encoding', ''],
  ['content-language', ''],
  ['content-length', ''],
  ['content-location', ''],
  ['content-range', ''],
  ['content-type', ''],
  ['cookie', ''],
  ['date', ''],
  ['etag', ''],
  ['expect', ''],
  ['expires', ''],
  ['from', ''],
  ['host', ''],
  ['if-match', ''],
  ['if-modified-since', ''],
  ['if-none-match', ''],
  ['if-range', ''],
  ['if-unmodified-since', ''],
  ['last-modified', ''],
  ['link', ''],
  ['location', ''],
  ['max-forwards', ''],
  ['proxy-authenticate', ''],
  ['proxy-authorization', ''],
  ['range', ''],
  ['referer', ''],
  ['refresh', ''],
  ['retry-after', ''],
  ['server', ''],
  ['set-cookie', ''],
  ['strict-transport-security', ''],
  ['transfer-encoding', ''],
  ['user-agent', ''],
  ['vary', ''],
  ['via', ''],
  ['www-authenticate', ''],
];

export class HpackError extends Error {}

function encodeInt(value: number, prefixBits: number, firstByte: number): number[] {
  const max = (1 << prefixBits) - 1;
  if (value < max) return [firstByte | value];
  const out = [firstByte | max];
  let v = value - max;
  while (v >= 128) {
    out.push((v % 128) + 128);
    v = Math.floor(v / 128);
  }
  out.push(v);
  return out;
}

function encodeString(s: string): Buffer {
  const b = Buffer.from(s, 'latin1');
  return Buffer.concat([Buffer.from(encodeInt(b.length, 7, 0)), b]);
}

/** Literal header fields without indexing; names found in the static table are referenced by index. */
export function encodeHeaders(headers: [string, string][]): Buffer {
  const parts: Buffer[] = [];
  for (const [name, value] of headers) {
    const full = STATIC.findIndex(([n, v], i) => i > 0 && n === name && v === value);
    if (full > 0) {
      parts.push(Buffer.from(encodeInt(full, 7, 0x80)));
      continue;
    }
    const idx = STATIC.findIndex(([n], i) => i > 0 && n === name);
    if (idx > 0) parts.push(Buffer.from(encodeInt(idx, 4, 0)));
    else parts.push(Buffer.from([0]), encodeString(name));
    parts.push(encodeString(value));
  }
  return Buffer.concat(parts);
}

let huffmanByCode: Map<number, number> | undefined;
function huffmanDecode(b: Buffer): string {
  huffmanByCode ??= new Map(HUFFMAN_CODES.map(([sym, code, len]) => [len * 0x1000000 + code, sym]));
  let out = '';
  let code = 0;
  let len = 0;
  for (const byte of b) {
    for (let bit = 7; bit >= 0; bit--) {
      code = code * 2 + ((byte >> bit) & 1);
      len++;
      const sym = huffmanByCode.get(len * 0x1000000 + code);
      if (sym !== undefined) {
        out += String.fromCharCode(sym);
        code = 0;
        len = 0;
      } else if (len > 13) {
        throw new HpackError('hpack: Huffman code outside printable ASCII');
      }
    }
  }
  if (len > 7 || code !== (1 << len) - 1) throw new HpackError('hpack: bad Huffman padding');
  return out;
}

/** A decoder keeps the dynamic table across the header blocks of one connection. */
export class HpackDecoder {
  private dynamic: [string, string][] = [];
  private size = 0;
  private maxSize = 4096;

  private entry(index: number): readonly [string, string] {
    if (index > 0 && index < STATIC.length) return STATIC[index]!;
    const e = this.dynamic[index - STATIC.length];
    if (!e) throw new HpackError(`hpack: index ${index} out of range`);
    return e;
  }

  private insert(name: string, value: string): void {
    this.dynamic.unshift([name, value]);
    this.size += name.length + value.length + 32;
    this.evict();
  }

  private evict(): void {
    while (this.size > this.maxSize && this.dynamic.length) {
      const [n, v] = this.dynamic.pop()!;
      this.size -= n.length + v.length + 32;
    }
  }

  decode(block: Buffer): [string, string][] {
    const out: [string, string][] = [];
    let pos = 0;
    const int = (prefixBits: number): number => {
      if (pos >= block.length) throw new HpackError('hpack: truncated integer');
      const max = (1 << prefixBits) - 1;
      let v = block[pos++]! & max;
      if (v < max) return v;
      let m = 1;
      for (;;) {
        if (pos >= block.length) throw new HpackError('hpack: truncated integer');
        const b = block[pos++]!;
        v += (b & 0x7f) * m;
        m *= 128;
        if (!(b & 0x80)) return v;
      }
    };
    const str = (): string => {
      const huffman = (block[pos]! & 0x80) !== 0;
      const n = int(7);
      if (pos + n > block.length) throw new HpackError('hpack: truncated string');
      const raw = block.subarray(pos, pos + n);
      pos += n;
      return huffman ? huffmanDecode(raw) : raw.toString('latin1');
    };
    while (pos < block.length) {
      const b = block[pos]!;
      if (b & 0x80) {
        out.push([...this.entry(int(7))]);
      } else if (b & 0x40) {
        const idx = int(6);
        const name = idx ? this.entry(idx)[0] : str();
        const value = str();
        this.insert(name, value);
        out.push([name, value]);
      } else if (b & 0x20) {
        this.maxSize = int(5);
        this.evict();
      } else {
        const idx = int(4);
        const name = idx ? this.entry(idx)[0] : str();
        out.push([name, str()]);
      }
    }
    return out;
  }
}

export const huffmanDecodeForTest = huffmanDecode;
