/**
 * Coalesced alias updates on one node, without a per-pod critical section around cloud calls.
 *
 * Each CNI call writes its alias change (add or remove one /32) as a request file in <stateDir>/alias/pending,
 * then tries (without waiting) to take a file lock that elects the flusher. The flusher waits a short batching
 * window (extended while requests keep arriving), and makes ONE read-modify-write of the NIC's alias ranges
 * (instances.get -> updateNetworkInterface with fingerprint + requestId -> zoneOperations.wait) carrying every
 * pending request, writes a result file per request, and repeats while requests are pending. Everyone else
 * waits for its result file (inotify), not for the lock: nobody queues behind another pod's call, and while a
 * 3 s operation runs new requests pile up and ride on the next call: 30 concurrent ADDs cost 2 calls.
 *
 * The flock is released by the kernel when a flusher dies; requests of dead processes are dropped (their
 * runtime calls DEL). A failed batch of several requests is retried one request at a time so one bad alias
 * (e.g. an IP still attached elsewhere) fails only its own caller.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { randomUUID } from 'node:crypto';
import { acquireFileLock, LockTimeoutError, TransientError, CniError } from '@cnikit/netlib';
import { GceClient, GceError, type AliasIpRange } from './gce';
import { sleep } from '@cnikit/netlib/retry';

export interface AliasChange {
  op: 'add' | 'remove';
  ip: string;
  rangeName?: string;
}
interface PendingRequest extends AliasChange {
  id: string;
  pid: number;
  at: number;
}
interface RequestResult {
  ok: boolean;
  code?: number;
  msg?: string;
  details?: string;
  calls?: number;
  batch?: number;
}

export interface CoalescerOptions {
  stateDir: string;
  gce: GceClient;
  zone: string;
  instance: string;
  nic: string;
  /** Pause after taking the flusher role to gather more requests, repeated while more keep arriving (at most 20 times). Default 25 ms. */
  batchWindowMs?: number;
  /** Give up waiting after this long (code 11). Default 180 s. */
  timeoutMs?: number;
}

export interface ApplyOutcome {
  calls: number;
  batch: number;
  flushed: boolean;
}

const alive = (pid: number): boolean => {
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
};

const cidr32 = (ip: string): string => (ip.includes('/') ? ip : `${ip}/32`);

/** Applies changes to an alias list; undefined when nothing changes. */
export function applyChanges(current: AliasIpRange[], changes: AliasChange[]): AliasIpRange[] | undefined {
  const next = current.map((a) => ({ ...a }));
  let changed = false;
  for (const c of changes) {
    const i = next.findIndex((a) => a.ipCidrRange === cidr32(c.ip));
    if (c.op === 'add' && i < 0) {
      next.push({ ipCidrRange: cidr32(c.ip), ...(c.rangeName ? { subnetworkRangeName: c.rangeName } : {}) });
      changed = true;
    }
    if (c.op === 'remove' && i >= 0) {
      next.splice(i, 1);
      changed = true;
    }
  }
  return changed ? next : undefined;
}

/**
 * The node's last word from GCE on its alias updates (`<stateDir>/alias/<instance>.<nic>/cloud.json`): what STATUS
 * reports while the cloud refuses them. Only outages are recorded as failures (rate limits, 5xx, transport); an
 * update refused for its content fails its own pods, not the node.
 */
export interface CloudHealth {
  ok: boolean;
  /** When it was recorded (ms since the epoch). */
  at: number;
  rateLimited?: boolean;
  /** Throttled: when the quota refills (Compute Engine refills rate quotas at the start of each minute). */
  retryAt?: number;
  msg?: string;
  details?: string;
}

export class AliasCoalescer {
  private readonly dir: string;
  constructor(private readonly opts: CoalescerOptions) {
    this.dir = path.join(opts.stateDir, 'alias', `${opts.instance}.${opts.nic}`);
  }

  /** What the last alias update of this node met, if any was made. */
  health(): CloudHealth | undefined {
    try {
      return JSON.parse(fs.readFileSync(path.join(this.dir, 'cloud.json'), 'utf8')) as CloudHealth;
    } catch {
      return undefined;
    }
  }

  /** Records a call's outcome: success, or an outage; other failures leave the record as it was. */
  recordHealth(err?: unknown): void {
    let h: CloudHealth;
    if (err === undefined) h = { ok: true, at: Date.now() };
    else if (err instanceof GceError && (err.rateLimited || err.transient)) {
      const r = errorResult(err) as { msg: string; details?: string };
      const at = Date.now();
      const retryAt = err.rateLimited ? (Math.floor(at / 60_000) + 1) * 60_000 : undefined;
      h = { ok: false, at, rateLimited: err.rateLimited, retryAt, msg: r.msg, details: r.details };
    } else return;
    fs.mkdirSync(this.dir, { recursive: true });
    const tmp = path.join(this.dir, `.cloud.${process.pid}.tmp`);
    fs.writeFileSync(tmp, JSON.stringify(h));
    fs.renameSync(tmp, path.join(this.dir, 'cloud.json'));
  }

  /** Applies one change through the node's batch; resolves when the cloud operation carrying it is DONE. */
  async apply(change: AliasChange): Promise<ApplyOutcome> {
    const pending = path.join(this.dir, 'pending');
    const done = path.join(this.dir, 'done');
    fs.mkdirSync(pending, { recursive: true });
    fs.mkdirSync(done, { recursive: true });
    const id = `${Date.now()}-${randomUUID()}`;
    const req: PendingRequest = { ...change, id, pid: process.pid, at: Date.now() };
    const tmp = path.join(pending, `.${id}.tmp`);
    fs.writeFileSync(tmp, JSON.stringify(req));
    fs.renameSync(tmp, path.join(pending, `${id}.json`));
    const resultFile = path.join(done, `${id}.json`);
    const deadline = Date.now() + (this.opts.timeoutMs ?? 180_000);
    for (;;) {
      const r = readResult(resultFile);
      if (r) return this.outcome(r, change, false);
      const left = deadline - Date.now();
      if (left <= 0) {
        try {
          fs.unlinkSync(path.join(pending, `${id}.json`));
        } catch {
          /* taken by a flusher */
        }
        throw new TransientError('gcp-ipam: alias update timed out', `${change.op} ${change.ip} on ${this.opts.instance}`);
      }
      const batch = await this.tryLead();
      const mine = readResult(resultFile);
      if (mine) return this.outcome(mine, change, batch > 0, batch || undefined);
      if (batch > 0) continue;
      // someone else leads: our request rides on its next call; the result file wakes us (inotify). The
      // periodic retry only matters when a leader died between reading the queue and writing results.
      await waitForFile(done, `${id}.json`, Math.min(left, 1000));
    }
  }

  /**
   * Takes the flusher role if free (never waits for it) and drains the queue: one cloud call per round, each
   * carrying every request pending at that moment, until nothing is pending. Returns the requests carried.
   */
  private async tryLead(): Promise<number> {
    const lockPath = path.join(this.dir, 'flush.lock');
    let carried = 0;
    for (;;) {
      let lock;
      try {
        lock = await acquireFileLock(lockPath, { timeoutMs: 0 });
      } catch (err) {
        if (err instanceof LockTimeoutError) return carried;
        throw err;
      }
      try {
        while (this.pendingCount() > 0) carried += await this.flush();
      } finally {
        lock.release();
      }
      // a request queued between our last look and the release would otherwise wait for its owner's retry
      if (this.pendingCount() === 0) return carried;
    }
  }

  private pendingCount(): number {
    try {
      return fs.readdirSync(path.join(this.dir, 'pending')).filter((f) => f.endsWith('.json')).length;
    } catch {
      return 0;
    }
  }

  private outcome(r: RequestResult, change: AliasChange, flushed: boolean, batch?: number): ApplyOutcome {
    if (!r.ok) throw new CniError(r.code ?? 999, r.msg ?? 'gcp-ipam: alias update failed', r.details ?? `${change.op} ${change.ip}`);
    return { calls: r.calls ?? 0, batch: batch ?? r.batch ?? 1, flushed };
  }

  /** As the flusher: one cloud read-modify-write carrying every pending request. Returns the batch size. */
  private async flush(): Promise<number> {
    const pendingDir = path.join(this.dir, 'pending');
    // batching window: batchWindowMs, extended while requests keep arriving (a burst of pods), at most 20x
    const window = this.opts.batchWindowMs ?? 25;
    if (window > 0) {
      const count = (): number => this.pendingCount();
      const until = Date.now() + 20 * window;
      let seen = count();
      for (;;) {
        await sleep(window);
        const now = count();
        if (now === seen || Date.now() >= until) break;
        seen = now;
      }
    }
    const reqs: PendingRequest[] = [];
    for (const f of fs.readdirSync(pendingDir)) {
      if (!f.endsWith('.json')) continue;
      const file = path.join(pendingDir, f);
      try {
        const r = JSON.parse(fs.readFileSync(file, 'utf8')) as PendingRequest;
        if (alive(r.pid)) reqs.push(r);
        else fs.unlinkSync(file);
      } catch {
        /* half-written or gone */
      }
    }
    if (reqs.length === 0) return 0;
    reqs.sort((a, b) => a.at - b.at);
    const results = new Map<string, RequestResult>();
    try {
      const calls = await this.opts.gce.updateAliases(this.opts.zone, this.opts.instance, this.opts.nic, (cur) => applyChanges(cur, reqs));
      for (const r of reqs) results.set(r.id, { ok: true, calls, batch: reqs.length });
      this.recordHealth();
    } catch (err) {
      this.recordHealth(err);
      if (reqs.length > 1 && !(err instanceof GceError && (err.rateLimited || err.transient))) {
        for (const r of reqs) {
          try {
            const calls = await this.opts.gce.updateAliases(this.opts.zone, this.opts.instance, this.opts.nic, (cur) =>
              applyChanges(cur, [r]),
            );
            results.set(r.id, { ok: true, calls, batch: 1 });
          } catch (e) {
            results.set(r.id, errorResult(e));
          }
        }
      } else for (const r of reqs) results.set(r.id, errorResult(err));
    }
    const doneDir = path.join(this.dir, 'done');
    for (const r of reqs) {
      const tmp = path.join(doneDir, `.${r.id}.tmp`);
      fs.writeFileSync(tmp, JSON.stringify(results.get(r.id)));
      fs.renameSync(tmp, path.join(doneDir, `${r.id}.json`));
      try {
        fs.unlinkSync(path.join(pendingDir, `${r.id}.json`));
      } catch {
        /* gone */
      }
    }
    return reqs.length;
  }
}

/** Resolves when dir/name appears (inotify through fs.watch) or after ms. */
function waitForFile(dir: string, name: string, ms: number): Promise<void> {
  return new Promise((resolve) => {
    let watcher: fs.FSWatcher | undefined;
    const finish = (): void => {
      clearTimeout(timer);
      watcher?.close();
      resolve();
    };
    const timer = setTimeout(finish, ms);
    try {
      watcher = fs.watch(dir, (_event, file) => {
        if (file === name) finish();
      });
      watcher.on('error', finish);
    } catch {
      // no inotify: fall back to the timer
    }
    if (fs.existsSync(path.join(dir, name))) finish();
  });
}

function readResult(file: string): RequestResult | undefined {
  try {
    const r = JSON.parse(fs.readFileSync(file, 'utf8')) as RequestResult;
    fs.unlinkSync(file);
    return r;
  } catch {
    return undefined;
  }
}

/** Maps cloud errors to CNI codes: rate limits and transport failures are transient (11); the rest 120. */
export function errorResult(err: unknown): RequestResult {
  if (err instanceof CniError) return { ok: false, code: err.code, msg: err.msg, details: err.details };
  // The message names the cause: it is what the kubelet's event shows the user of a pod that waits.
  if (err instanceof GceError && err.rateLimited)
    return { ok: false, code: 11, msg: 'gcp-ipam: GCE rate limit exceeded, try again', details: err.message };
  if (err instanceof GceError && (err.transient || err.busy))
    return { ok: false, code: 11, msg: 'gcp-ipam: cloud API unavailable, try again', details: err.message };
  return { ok: false, code: 120, msg: 'gcp-ipam: alias update failed', details: (err as Error).message };
}
