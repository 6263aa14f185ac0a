/**
 * Turns kernel answers into NetlinkError with the symbolic errno.
 *
 * The kernel reports failures as NLMSG_ERROR carrying a negative errno; the
 * `netlink` package flattens those into a plain Error whose message holds the
 * name, so the request layer (channel.ts) reads the number itself and raises
 * KernelErrno, which `toNetlinkError` names through os.constants.errno.
 */
import { constants } from 'node:os';
import { NetlinkError } from '../errors';

/** A negative errno from NLMSG_ERROR / NLMSG_DONE, before we know which operation failed. */
export class KernelErrno extends Error {
  readonly errno: number;
  constructor(errno: number) {
    super(`netlink: kernel answered ${errnoName(errno)}`);
    this.name = 'KernelErrno';
    this.errno = errno;
  }
}

let names: Map<number, string> | undefined;
/** Where two names share a number, the one the kernel's own headers and iproute2 use. */
const PREFERRED = ['EOPNOTSUPP', 'EAGAIN', 'EDEADLK'];

/** Symbolic name for an errno (sign ignored): 17 -> "EEXIST". Unknown numbers become "errno 123". */
export function errnoName(errno: number): string {
  if (!names) {
    names = new Map();
    for (const [name, value] of Object.entries(constants.errno)) if (!names.has(value)) names.set(value, name);
    for (const name of PREFERRED) {
      const value = (constants.errno as Record<string, number | undefined>)[name];
      if (value !== undefined) names.set(value, name);
    }
  }
  const n = Math.abs(errno);
  return names.get(n) ?? `errno ${n}`;
}

/**
 * Wraps whatever a netlink exchange threw as NetlinkError(op, object, errno).
 * NetlinkErrors pass through (they are already described); errors without an
 * errno (bugs, bad arguments) are rethrown untouched so they keep their type.
 */
export function toNetlinkError(op: string, object: string, err: unknown): Error {
  if (err instanceof NetlinkError) return err;
  if (err instanceof KernelErrno) return new NetlinkError(op, object, errnoName(err.errno), { cause: err });
  const e = err as { code?: unknown; errno?: unknown } | null;
  if (e && typeof e.code === 'string' && /^E[A-Z0-9]+$/.test(e.code)) return new NetlinkError(op, object, e.code, { cause: err });
  if (e && typeof e.errno === 'number') return new NetlinkError(op, object, errnoName(e.errno), { cause: err });
  return err instanceof Error ? err : new Error(String(err));
}
