/**
 * BlockingUnixStream against servers in a child process (a blocked test process could not run a server of
 * its own): an exchange to the peer's end of stream, and each way it fails, classified as a connect
 * failure, the deadline or the transport.
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { serveInTempDir } from '@cnikit/netlib-testing';
import { BlockingUnixStream, UnixStreamError } from '../../src/unix';

// echo.sock answers each chunk upper-cased and ends the stream after a chunk holding "!" (one byte: never split
// between chunks); mute.sock accepts and never answers.
const SERVERS = `
const net = require('node:net');
const [dir] = process.argv.slice(1);
const held = [];
const echo = net.createServer((c) => c.on('data', (d) => (String(d).includes('!') ? c.end(String(d).toUpperCase()) : c.write(String(d).toUpperCase()))));
const mute = net.createServer((c) => void held.push(c));
echo.listen(dir + '/echo.sock', () => mute.listen(dir + '/mute.sock', () => process.stdout.write('ready\\n')));
`;

let dir: string;
let servers: { stop(): Promise<void> };

beforeAll(async () => {
  ({ dir, ...servers } = await serveInTempDir('netlib-unix-', [process.execPath, '-e', SERVERS]));
});

afterAll(() => servers.stop());

/** The UnixStreamError `f` throws. */
function thrown(f: () => unknown): UnixStreamError {
  try {
    f();
  } catch (e) {
    if (e instanceof UnixStreamError) return e;
    throw e;
  }
  throw new Error('expected a UnixStreamError, nothing was thrown');
}

/** Everything the peer sends until its end of stream. */
function readAll(s: BlockingUnixStream): string {
  let text = '';
  for (let chunk = s.read(); chunk.length > 0; chunk = s.read()) text += chunk.toString();
  return text;
}

describe('BlockingUnixStream', () => {
  it('writes, reads the answers, and reads an empty buffer at the peer end of stream', () => {
    const s = BlockingUnixStream.connect(path.join(dir, 'echo.sock'), 5_000);
    try {
      s.write(Buffer.from('hello '));
      expect(s.read().toString()).toBe('HELLO ');
      s.write(Buffer.from('bye!'));
      expect(readAll(s)).toBe('BYE!');
      expect(s.read().length).toBe(0);
    } finally {
      s.close();
    }
  });

  it('carries a write larger than the socket buffers (the peer reads while we write)', () => {
    const s = BlockingUnixStream.connect(path.join(dir, 'echo.sock'), 10_000);
    try {
      const big = Buffer.alloc(4 << 20, 'a');
      s.write(Buffer.concat([big, Buffer.from('!')]));
      expect(readAll(s)).toBe(`${'A'.repeat(big.length)}!`);
    } finally {
      s.close();
    }
  });

  it('no socket file: a connect failure with ENOENT, naming the path', () => {
    const missing = path.join(dir, 'none.sock');
    const e = thrown(() => BlockingUnixStream.connect(missing, 1_000));
    expect(e).toMatchObject({ failure: 'connect', code: 'ENOENT', message: `connect ENOENT ${missing}` });
  });

  it('a socket file nobody listens on: a connect failure with ECONNREFUSED', () => {
    const stale = path.join(dir, 'stale.sock');
    const net = spawn(process.execPath, [
      '-e',
      `require('node:net').createServer().listen(${JSON.stringify(stale)}, () => process.exit(0))`,
    ]);
    return new Promise<void>((resolve) => net.once('exit', () => resolve())).then(() => {
      // the listener's process is gone, its socket file stays
      expect(fs.existsSync(stale)).toBe(true);
      expect(thrown(() => BlockingUnixStream.connect(stale, 1_000))).toMatchObject({ failure: 'connect', code: 'ECONNREFUSED' });
    });
  });

  it('a peer that never answers: the deadline, counted from connect, and not much later', () => {
    const t0 = Date.now();
    const s = BlockingUnixStream.connect(path.join(dir, 'mute.sock'), 300);
    try {
      s.write(Buffer.from('anyone?'));
      expect(thrown(() => s.read())).toMatchObject({ failure: 'deadline', code: 'ETIMEDOUT' });
      expect(Date.now() - t0).toBeGreaterThanOrEqual(295);
      expect(Date.now() - t0).toBeLessThan(3_000);
      // the deadline is the connection's: a later call fails at once
      expect(thrown(() => s.read())).toMatchObject({ failure: 'deadline' });
    } finally {
      s.close();
    }
  });

  it('a closed stream refuses reads and writes; close is idempotent', () => {
    const s = BlockingUnixStream.connect(path.join(dir, 'echo.sock'), 1_000);
    s.close();
    s.close();
    expect(thrown(() => s.read())).toMatchObject({ failure: 'transport', code: 'EBADF' });
    expect(thrown(() => s.write(Buffer.from('x')))).toMatchObject({ failure: 'transport', code: 'EBADF' });
  });
});
