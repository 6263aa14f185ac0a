/**
 * Hand-written protobuf encoding of the few pkg.cnirpc messages (cnirpc.proto) and of google.rpc.Status,
 * shared by coild (@cnikit/unary-grpc/server's handlers take and return Buffers) and the thin `coil` client (@cnikit/unary-grpc),
 * on the wire-format primitives of @cnikit/unary-grpc: no code generation, no proto-loader.
 */
import { ProtoWriter, protoBool, protoBytes, protoFields, protoNumber, protoString } from '@cnikit/unary-grpc';

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

export function encodeCNIArgs(a: Partial<CNIArgs>): Buffer {
  const w = new ProtoWriter()
    .bytes(1, a.containerId ?? '')
    .bytes(2, a.netns ?? '')
    .bytes(3, a.ifname ?? '');
  for (const [k, v] of Object.entries(a.args ?? {})) w.bytes(4, new ProtoWriter().bytes(1, k).bytes(2, v).finish(), true);
  w.bytes(5, a.path ?? '').bytes(6, a.stdinData ?? Buffer.alloc(0));
  for (const ip of a.ips ?? []) w.bytes(7, ip, true);
  for (const [k, v] of Object.entries(a.interfaces ?? {})) w.bytes(8, new ProtoWriter().bytes(1, k).bool(2, v).finish(), true);
  return w.finish();
}

export function decodeCNIArgs(buf: Buffer): CNIArgs {
  const a: CNIArgs = { containerId: '', netns: '', ifname: '', args: {}, path: '', stdinData: Buffer.alloc(0), ips: [], interfaces: {} };
  for (const f of protoFields(buf)) {
    switch (f.field) {
      case 1:
        a.containerId = protoString(f.value);
        break;
      case 2:
        a.netns = protoString(f.value);
        break;
      case 3:
        a.ifname = protoString(f.value);
        break;
      case 4: {
        let k = '',
          v = '';
        for (const e of protoFields(protoBytes(f.value))) {
          if (e.field === 1) k = protoString(e.value);
          else if (e.field === 2) v = protoString(e.value);
        }
        a.args[k] = v;
        break;
      }
      case 5:
        a.path = protoString(f.value);
        break;
      case 6:
        a.stdinData = Buffer.from(protoBytes(f.value));
        break;
      case 7:
        a.ips.push(protoString(f.value));
        break;
      case 8: {
        let k = '',
          v = false;
        for (const e of protoFields(protoBytes(f.value))) {
          if (e.field === 1) k = protoString(e.value);
          else if (e.field === 2) v = protoBool(e.value);
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

export const encodeAddResponse = (result: Buffer | string): Buffer => new ProtoWriter().bytes(1, result).finish();
export function decodeAddResponse(buf: Buffer): Buffer {
  for (const f of protoFields(buf)) if (f.field === 1) return Buffer.from(protoBytes(f.value));
  return Buffer.alloc(0);
}
export const encodeEmpty = (): Buffer => Buffer.alloc(0);

export const encodeCNIError = (e: CNIErrorMsg): Buffer => new ProtoWriter().uint(1, e.code).bytes(2, e.msg).bytes(3, e.details).finish();
export function decodeCNIError(buf: Buffer): CNIErrorMsg {
  const e: CNIErrorMsg = { code: 0, msg: '', details: '' };
  for (const f of protoFields(buf)) {
    if (f.field === 1) e.code = protoNumber(f.value);
    else if (f.field === 2) e.msg = protoString(f.value);
    else if (f.field === 3) e.details = protoString(f.value);
  }
  return e;
}

/** google.rpc.Status{code, message, details: [Any{type_url, value}]} carrying one CNIError. */
export function encodeStatusWithCNIError(grpcCode: number, message: string, e: CNIErrorMsg): Buffer {
  const any = new ProtoWriter().bytes(1, CNI_ERROR_TYPE_URL).bytes(2, encodeCNIError(e)).finish();
  return new ProtoWriter().uint(1, grpcCode).bytes(2, message).bytes(3, any, true).finish();
}

/** The CNIError inside a google.rpc.Status, if there is one. */
export function cniErrorFromStatus(buf: Buffer): CNIErrorMsg | undefined {
  for (const f of protoFields(buf)) {
    if (f.field !== 3) continue;
    let url = '';
    let value: Buffer = Buffer.alloc(0);
    for (const a of protoFields(protoBytes(f.value))) {
      if (a.field === 1) url = protoString(a.value);
      else if (a.field === 2) value = protoBytes(a.value);
    }
    if (url === CNI_ERROR_TYPE_URL) return decodeCNIError(value);
  }
  return undefined;
}
