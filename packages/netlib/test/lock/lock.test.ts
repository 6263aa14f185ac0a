import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { LockTimeoutError } from '../../src/errors';
import { acquireFileLock, withFileLock } from '../../src/lock';
import { useBuiltFixture } from '../cni/fixtures/build';

const fixture = useBuiltFixture(path.join(__dirname, 'fixtures/lock-child.ts'));

function runChild(
  lock: string,
  log: string,
  holdMs: number,
  timeoutMs: number,
  mode?: string,
): { proc: ChildProcess; done: Promise<{ code: number | null; stderr: string }> } {
  const proc = spawn(fixture.bin, [lock, log, String(holdMs), String(timeoutMs), ...(mode ? [mode] : [])], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  proc.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
  const done = new Promise<{ code: number | null; stderr: string }>((resolve) => proc.on('close', (code) => resolve({ code, stderr })));
  return { proc, done };
}

describe('withFileLock', () => {
  it('returns the value of fn, creates the directory and records the holder pid', async () => {
    const lock = path.join(fixture.dir, 'a/b/c.lock');
    const v = await withFileLock(lock, () => {
      expect(fs.readFileSync(lock, 'utf8')).toBe(`${process.pid}\n`);
      return 42;
    });
    expect(v).toBe(42);
    expect(fs.existsSync(lock)).toBe(true); // never deleted: see the module comment
  });

  it('releases the lock when fn throws', async () => {
    const lock = path.join(fixture.dir, 'throw.lock');
    await expect(withFileLock(lock, () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    await expect(withFileLock(lock, () => 'again', { timeoutMs: 0 })).resolves.toBe('again');
  });

  it('times out with LockTimeoutError (code 11) while another holder keeps it', async () => {
    const lock = path.join(fixture.dir, 'timeout.lock');
    const held = await acquireFileLock(lock);
    try {
      const started = Date.now();
      const err = await withFileLock(lock, () => 'never', { timeoutMs: 300 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(LockTimeoutError);
      expect(err).toMatchObject({ code: 11, path: lock, timeoutMs: 300 });
      expect(Date.now() - started).toBeGreaterThanOrEqual(290);
      await expect(withFileLock(lock, () => 'never', { timeoutMs: 0 })).rejects.toBeInstanceOf(LockTimeoutError);
    } finally {
      held.release();
      held.release(); // idempotent
    }
    await expect(withFileLock(lock, () => 'free', { timeoutMs: 0 })).resolves.toBe('free');
  });

  it('waits for the holder and then runs', async () => {
    const lock = path.join(fixture.dir, 'wait.lock');
    const held = await acquireFileLock(lock);
    const order: string[] = [];
    const waiter = withFileLock(lock, () => order.push('waiter'), { timeoutMs: 10_000 });
    await new Promise((r) => setTimeout(r, 200));
    order.push('holder releases');
    held.release();
    await waiter;
    expect(order).toEqual(['holder releases', 'waiter']);
  });

  it('rejects a negative timeout', async () => {
    await expect(withFileLock(path.join(fixture.dir, 'x.lock'), () => 1, { timeoutMs: -1 })).rejects.toThrow(RangeError);
  });
});

describe('lock contention between processes', () => {
  it('serialises the critical sections of several processes', async () => {
    const lock = path.join(fixture.dir, 'contend.lock');
    const log = path.join(fixture.dir, 'contend.log');
    const kids = Array.from({ length: 4 }, () => runChild(lock, log, 80, 20_000));
    const results = await Promise.all(kids.map((k) => k.done));
    expect(results.map((r) => r.code)).toEqual([0, 0, 0, 0]);
    const lines = fs.readFileSync(log, 'utf8').trim().split('\n');
    expect(lines).toHaveLength(8);
    // Every "in" is followed by the "out" of the same process: no overlap.
    for (let i = 0; i < lines.length; i += 2) {
      const [pid, what] = lines[i]!.split(' ');
      expect(what).toBe('in');
      expect(lines[i + 1]).toBe(`${pid} out`);
    }
  }, 30_000);

  it('a process waiting past its timeout fails with LockTimeoutError', async () => {
    const lock = path.join(fixture.dir, 'proc-timeout.lock');
    const held = await acquireFileLock(lock);
    try {
      const r = await runChild(lock, path.join(fixture.dir, 'proc-timeout.log'), 0, 300).done;
      expect(r.code).toBe(3);
      expect(r.stderr).toContain('LockTimeoutError');
    } finally {
      held.release();
    }
  }, 30_000);

  it('the kernel frees the lock of a holder killed with SIGKILL', async () => {
    const lock = path.join(fixture.dir, 'killed.lock');
    const log = path.join(fixture.dir, 'killed.log');
    const k = runChild(lock, log, 0, 5000, 'hang');
    await new Promise<void>((resolve) => k.proc.stdout!.on('data', () => resolve()));
    await expect(withFileLock(lock, () => 'x', { timeoutMs: 0 })).rejects.toBeInstanceOf(LockTimeoutError);
    k.proc.kill('SIGKILL');
    await k.done;
    await expect(withFileLock(lock, () => 'after crash', { timeoutMs: 2000 })).resolves.toBe('after crash');
  }, 30_000);
});
