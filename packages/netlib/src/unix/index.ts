/**
 * A blocking UNIX stream socket, for a one-shot CNI call that asks its daemon one question (coil asking
 * coild, terway asking terwayd, cilium-eni-ipam asking its agent). Loading node:net and its streams and
 * running one exchange through the event loop costs such a call ~20% of the runtime's bare start; the
 * same exchange through three blocking system calls of our addon costs ~3% (docs/build.md, "STATUS of
 * the plugins that ask a daemon").
 *
 * Blocking is only right where nothing else runs: a daemon, or a test whose server is in the same
 * process, must keep node:net. So a process says it is a one-shot call (pluginMain does, for every plugin
 * binary) and the clients ask `blockingSocketsAllowed()` before taking this path.
 */
import { closeSync } from 'node:fs';
import { netnsAddon } from '../native';

export { allowBlockingSockets, blockingSocketsAllowed } from './mode';

/** Why an exchange failed: nobody listening, the deadline, or the connection breaking. */
export type StreamFailure = 'connect' | 'deadline' | 'transport';

export class UnixStreamError extends Error {
  constructor(
    message: string,
    readonly failure: StreamFailure,
    readonly code: string | undefined,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'UnixStreamError';
  }
}

const errCode = (e: unknown): string | undefined => (e as NodeJS.ErrnoException).code;

/** One connection with one deadline for everything done on it. */
export class BlockingUnixStream {
  private fd: number | undefined;

  private constructor(
    fd: number,
    private readonly path: string,
    private readonly deadline: number,
  ) {
    this.fd = fd;
  }

  /** Connects to `path`; every later write and read must end within `timeoutMs` of now. */
  static connect(path: string, timeoutMs: number): BlockingUnixStream {
    const deadline = Date.now() + timeoutMs;
    const addon = netnsAddon(); // outside the try: an addon that cannot load is no connect failure
    let fd: number;
    try {
      fd = addon.unixConnect(path, Math.max(1, Math.ceil(timeoutMs)));
    } catch (e) {
      const failure = errCode(e) === 'ETIMEDOUT' || errCode(e) === 'EAGAIN' ? 'deadline' : 'connect';
      throw new UnixStreamError(`connect ${errCode(e) ?? (e as Error).message} ${path}`, failure, errCode(e), { cause: e });
    }
    return new BlockingUnixStream(fd, path, deadline);
  }

  write(data: Buffer): void {
    this.io('write', (fd, left) => netnsAddon().sockWrite(fd, data, left));
  }

  /** The next bytes the peer sent; an empty buffer once it has closed its side. */
  read(): Buffer {
    return this.io('read', (fd, left) => netnsAddon().sockRead(fd, left));
  }

  close(): void {
    if (this.fd === undefined) return;
    closeSync(this.fd);
    this.fd = undefined;
  }

  private io<T>(what: string, op: (fd: number, leftMs: number) => T): T {
    if (this.fd === undefined) throw new UnixStreamError(`${what} EBADF ${this.path} (closed)`, 'transport', 'EBADF');
    const left = Math.floor(this.deadline - Date.now());
    if (left <= 0) throw new UnixStreamError(`${what} ETIMEDOUT ${this.path}`, 'deadline', 'ETIMEDOUT');
    try {
      return op(this.fd, left);
    } catch (e) {
      const failure = errCode(e) === 'ETIMEDOUT' ? 'deadline' : 'transport';
      throw new UnixStreamError(`${what} ${errCode(e) ?? (e as Error).message} ${this.path}`, failure, errCode(e), { cause: e });
    }
  }
}
