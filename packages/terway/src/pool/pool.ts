/**
 * The ENI multi-IP resource pool: a pure state machine over an EniCloud and
 * a Clock. Invariants:
 *
 * - allocate/release/gc never wait for the cloud: they change the in-memory
 *   state and return; cloud calls run in the background (Terway issue #100: a slow
 *   or failing ENI creation must not stall allocation from what is pooled,
 *   releases or GC).
 * - A pod key holds at most one IP; allocate is idempotent per key.
 * - idle IPs: kept >= min_pool_size (and grown for waiters and the warm-up),
 *   kept <= max_pool_size (excess released at once), and IPs idle longer than
 *   idle_ip_reclaim_after are returned down to min_pool_size, at most
 *   idle_ip_reclaim_batch_size per idle_ip_reclaim_interval.
 * - ENIs: at most min(max_eni, EniQuantity - 1) beside the primary one, each
 *   with at most EniPrivateIpAddressQuantity IPs; an ENI whose IPs are all
 *   released is detached and deleted (kept while the pool has <= min_eni).
 * - After a cloud failure growth backs off exponentially (1 s .. 60 s) and the
 *   pods waiting on it fail with a try-again error (CNI code 11).
 */
import { TransientError } from '@cnikit/netlib';
import type { Clock } from '../clock';
import type { PoolConfig } from './config';
import { pickVSwitch } from './vswitch';
import type { EniCloud, EniInfo, EniQuota, IpLease, PoolStats, VSwitchInfo } from './types';

type IpStatus = 'idle' | 'used' | 'releasing';

interface IpState {
  ip: string;
  eniId: string;
  status: IpStatus;
  /** The pod key using it, or the key it is reserved for while idle. */
  owner?: string;
  idleSince: number;
  reservedUntil?: number;
}

interface EniState {
  info: EniInfo;
  ips: Map<string, IpState>;
  /** IPs being assigned on this ENI right now. */
  assigning: number;
  deleting: boolean;
}

interface Waiter {
  key: string;
  resolve(l: IpLease): void;
  reject(e: Error): void;
  cancel(): void;
}

export class PoolExhaustedError extends TransientError {
  constructor(msg: string, options?: { cause?: unknown }) {
    super(`pool: ${msg}`, '', options);
    this.name = 'PoolExhaustedError';
  }
}

export interface PoolOptions {
  config: PoolConfig;
  quota: EniQuota;
  cloud: EniCloud;
  clock: Clock;
  /** vSwitches to create ENIs in when eni_conf.vswitches has none for this zone. */
  zone: string;
  defaultVSwitches?: string[];
  /** How long allocate waits for the cloud before failing with code 11 (default 30 s). */
  allocTimeoutMs?: number;
  /** Period of the background reconcile once start() is called (default 1 s). */
  syncPeriodMs?: number;
  /** Random source for the "random" vSwitch policy. */
  random?: () => number;
  /** Most IPs requested in one AssignPrivateIpAddresses call (the API allows 10). */
  assignBatch?: number;
  /** Events for logs and metrics. */
  onEvent?: (e: PoolEvent) => void;
}

export type PoolEvent =
  | { type: 'eni-created'; eniId: string; vswitchId: string; ips: number }
  | { type: 'eni-deleted'; eniId: string }
  | { type: 'ips-assigned'; eniId: string; ips: number }
  | { type: 'ips-released'; eniId: string; ips: number }
  | { type: 'cloud-error'; op: string; error: string };

/** Errors that say the vSwitch itself cannot serve (out of IPs, gone): try another one. */
export function isVSwitchError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  const text = typeof code === 'string' ? code : err instanceof Error ? err.message : String(err);
  return /IpNotEnough|InsufficientIp|VSwitchId|VSwitch\.|QuotaExceeded\.PrivateIpAddress/i.test(text);
}

const BACKOFF_MIN_MS = 1000;
const BACKOFF_MAX_MS = 60_000;
const VSW_CACHE_MS = 30_000;

export class EniIpPool {
  private readonly enis = new Map<string, EniState>();
  private readonly byKey = new Map<string, IpState>();
  private waiters: Waiter[] = [];
  private creating = 0;
  private creatingIps = 0;
  private acquiredSinceStart = 0;
  private lastReclaimAt: number;
  private backoffMs = 0;
  private retryAt = 0;
  /** The last cloud call's failure, until one succeeds. */
  private lastFailure: string | undefined;
  private kicked = false;
  private stopTimer: (() => void) | undefined;
  private vswCache: { at: number; list: VSwitchInfo[] } | undefined;
  private readonly vswCoolUntil = new Map<string, number>();
  private maxEnis: number;

  constructor(private readonly opts: PoolOptions) {
    this.maxEnis = EniIpPool.maxEnisFor(opts.config, opts.quota);
    this.lastReclaimAt = opts.clock.now();
  }

  private static maxEnisFor(config: PoolConfig, quota: EniQuota): number {
    const byQuota = Math.max(0, quota.eniQuantity - 1);
    return config.maxEni > 0 ? Math.min(config.maxEni, byQuota) : byQuota;
  }

  /** The configuration in force (replaced by updateConfig). */
  get config(): PoolConfig {
    return this.opts.config;
  }

  /**
   * Applies a new eni_conf live (the ConfigMap watch): sizes, idle reclaim,
   * min/max ENIs, vSwitches and their policy, security groups. The next pass
   * grows or shrinks toward the new sizes; IPs and ENIs in use are never taken
   * back (a max_eni below the ENIs attached only stops new ones).
   */
  updateConfig(config: PoolConfig): void {
    this.opts.config = config;
    this.maxEnis = EniIpPool.maxEnisFor(config, this.opts.quota);
    this.vswCache = undefined; // the vSwitch list may have changed
    this.kick();
  }

  /** Total IPs the pool may ever hold. */
  get capacity(): number {
    return this.maxEnis * this.opts.quota.ipsPerEni;
  }

  /** Adopts ENIs and leases found at start-up (cloud + local state); call before start(). */
  restore(enis: EniInfo[], leases: { key: string; ip: string }[] = []): void {
    const now = this.opts.clock.now();
    for (const info of enis) {
      const st: EniState = { info: { ...info, ips: [...info.ips] }, ips: new Map(), assigning: 0, deleting: false };
      for (const a of info.ips) st.ips.set(a, { ip: a, eniId: info.eniId, status: 'idle', idleSince: now });
      this.enis.set(info.eniId, st);
    }
    for (const l of leases) {
      const s = this.findIp(l.ip);
      if (!s) continue;
      s.status = 'used';
      s.owner = l.key;
      this.byKey.set(l.key, s);
    }
    this.kick();
  }

  /** Starts the periodic reconcile on the pool's clock. */
  start(): void {
    if (this.stopTimer) return;
    const period = this.opts.syncPeriodMs ?? 1000;
    const loop = (): void => {
      this.reconcile();
      this.stopTimer = this.opts.clock.setTimer(period, loop);
    };
    this.stopTimer = this.opts.clock.setTimer(0, loop);
  }

  stop(): void {
    this.stopTimer?.();
    this.stopTimer = undefined;
    for (const w of this.waiters.splice(0)) {
      w.cancel();
      w.reject(new PoolExhaustedError('pool stopped'));
    }
  }

  /**
   * An IP for `key` (namespace/name). Idempotent: the same key gets the same
   * IP while it holds one, or while one is reserved for it. Answers from the
   * idle pool at once; otherwise waits for the cloud up to allocTimeoutMs and
   * fails with PoolExhaustedError (code 11) on timeout, cloud failure or quota.
   */
  allocate(key: string): Promise<IpLease> {
    const held = this.byKey.get(key);
    if (held && held.status === 'used') return Promise.resolve(this.lease(held));
    if (held && held.status === 'idle') {
      this.take(held, key);
      return Promise.resolve(this.lease(held));
    }
    const free = this.pickIdle();
    if (free) {
      this.take(free, key);
      this.kick();
      return Promise.resolve(this.lease(free));
    }
    if (this.totalIps() + this.inflight() >= this.capacity && this.waiters.length >= this.inflight()) {
      return Promise.reject(new PoolExhaustedError(`no IP left: ${this.capacity} IPs on ${this.maxEnis} ENIs are all in use`));
    }
    return new Promise<IpLease>((resolve, reject) => {
      const w: Waiter = {
        key,
        resolve,
        reject,
        cancel: this.opts.clock.setTimer(this.opts.allocTimeoutMs ?? 30_000, () => {
          this.waiters = this.waiters.filter((x) => x !== w);
          reject(new PoolExhaustedError(`timed out waiting for an IP for ${key}`));
        }),
      };
      this.waiters.push(w);
      this.kick();
    });
  }

  /**
   * Gives the IP of `key` back to the pool (idempotent: an unknown key is
   * fine). With reserveForMs the IP stays bound to the key that long (sticky
   * IPs of StatefulSet pods) before it becomes free.
   */
  release(key: string, opts: { reserveForMs?: number } = {}): boolean {
    const s = this.byKey.get(key);
    if (!s || s.status !== 'used') return false;
    const now = this.opts.clock.now();
    s.status = 'idle';
    s.idleSince = now;
    if (opts.reserveForMs && opts.reserveForMs > 0) {
      s.reservedUntil = now + opts.reserveForMs;
    } else {
      this.unbind(s);
      this.serveWaiters();
    }
    this.kick();
    return true;
  }

  /** Releases every lease whose key `alive` rejects (pods deleted without CNI DEL). Returns the keys. */
  gc(alive: (key: string) => boolean): string[] {
    const gone: string[] = [];
    for (const [key, s] of this.byKey) {
      if (s.status === 'used' && !alive(key)) gone.push(key);
      else if (s.status === 'idle' && s.reservedUntil !== undefined && !alive(key) && s.reservedUntil <= this.opts.clock.now())
        gone.push(key);
    }
    for (const key of gone) {
      const s = this.byKey.get(key)!;
      if (s.status === 'used') this.release(key);
      else {
        this.unbind(s);
      }
    }
    if (gone.length) this.serveWaiters();
    return gone;
  }

  leaseOf(key: string): IpLease | undefined {
    const s = this.byKey.get(key);
    return s && s.status === 'used' ? this.lease(s) : undefined;
  }

  leases(): { key: string; lease: IpLease; reservedUntil?: number }[] {
    return [...this.byKey].map(([key, s]) => ({
      key,
      lease: this.lease(s),
      ...(s.status === 'idle' && s.reservedUntil !== undefined ? { reservedUntil: s.reservedUntil } : {}),
    }));
  }

  eniList(): EniInfo[] {
    return [...this.enis.values()].map((e) => ({ ...e.info, ips: [...e.ips.keys()] }));
  }

  /**
   * Why no allocation can succeed now, or undefined: nothing is idle and the pool is backing off from a failed
   * cloud call (CNI STATUS says so). Once the back-off ends the next allocation asks the cloud again, so a node
   * whose STATUS failed does not stay waiting for a pod that would never come.
   */
  unavailable(): string | undefined {
    if (this.lastFailure === undefined || this.opts.clock.now() >= this.retryAt || this.pickIdle()) return undefined;
    return this.lastFailure;
  }

  stats(): PoolStats {
    let idle = 0;
    let used = 0;
    let reserved = 0;
    let releasing = 0;
    for (const e of this.enis.values())
      for (const s of e.ips.values()) {
        if (s.status === 'used') used++;
        else if (s.status === 'releasing') releasing++;
        else if (s.owner !== undefined) reserved++;
        else idle++;
      }
    return {
      idle,
      used,
      reserved,
      releasing,
      inflight: this.inflight(),
      enis: this.enis.size,
      creatingEnis: this.creating,
      waiters: this.waiters.length,
      capacity: this.capacity,
    };
  }

  /** Schedules one reconcile after the current job (coalesced). */
  kick(): void {
    if (this.kicked) return;
    this.kicked = true;
    queueMicrotask(() => {
      this.kicked = false;
      this.reconcile();
    });
  }

  /**
   * One pass of the pool rules. Synchronous: it starts cloud calls and
   * returns; their completions kick another pass.
   */
  reconcile(): void {
    const now = this.opts.clock.now();
    this.expireReservations(now);
    this.serveWaiters();
    const idle = this.freeIdle();
    // Grow.
    const warmLeft = Math.max(0, this.opts.config.warmUpSize - this.acquiredSinceStart);
    const want = Math.max(this.waiters.length + this.opts.config.minPoolSize - idle.length, warmLeft) - this.inflight();
    if (now >= this.retryAt) {
      if (want > 0) this.grow(want);
      else if (this.enis.size + this.creating < Math.min(this.opts.config.minEni, this.maxEnis)) this.createEni(1);
    }
    // Shrink: beyond max at once; idle ones after idle_ip_reclaim_after in batches.
    if (this.waiters.length > 0) return;
    const excess = idle.length - this.opts.config.maxPoolSize;
    if (excess > 0) {
      this.shrink(idle, excess);
      return;
    }
    const c = this.opts.config;
    if (c.idleReclaimAfterMs > 0 && now - this.lastReclaimAt >= c.idleReclaimIntervalMs) {
      const old = idle.filter((s) => now - s.idleSince >= c.idleReclaimAfterMs);
      const n = Math.min(old.length, idle.length - c.minPoolSize, c.idleReclaimBatchSize);
      if (n > 0) {
        this.lastReclaimAt = now;
        this.shrink(old, n);
      }
    }
  }

  // ---- internals ----

  private lease(s: IpState): IpLease {
    const e = this.enis.get(s.eniId)!.info;
    return { ip: s.ip, eniId: e.eniId, mac: e.mac, vswitchId: e.vswitchId, vswitchCidr: e.vswitchCidr, gateway: e.gateway };
  }

  private findIp(a: string): IpState | undefined {
    for (const e of this.enis.values()) {
      const s = e.ips.get(a);
      if (s) return s;
    }
    return undefined;
  }

  private take(s: IpState, key: string): void {
    s.status = 'used';
    s.owner = key;
    delete s.reservedUntil;
    this.byKey.set(key, s);
  }

  private unbind(s: IpState): void {
    if (s.owner !== undefined && this.byKey.get(s.owner) === s) this.byKey.delete(s.owner);
    delete s.owner;
    delete s.reservedUntil;
  }

  /** Idle IPs not reserved and not on an ENI being deleted, most recently idle first. */
  private freeIdle(): IpState[] {
    const out: IpState[] = [];
    for (const e of this.enis.values()) {
      if (e.deleting) continue;
      for (const s of e.ips.values()) if (s.status === 'idle' && s.owner === undefined) out.push(s);
    }
    return out.sort((a, b) => b.idleSince - a.idleSince);
  }

  /** Prefers the ENI with the most IPs in use, so lightly used ENIs can drain. */
  private pickIdle(): IpState | undefined {
    let best: IpState | undefined;
    let bestUsed = -1;
    for (const e of this.enis.values()) {
      if (e.deleting) continue;
      let used = 0;
      let cand: IpState | undefined;
      for (const s of e.ips.values()) {
        if (s.status === 'used') used++;
        else if (s.status === 'idle' && s.owner === undefined && !cand) cand = s;
      }
      if (cand && used > bestUsed) {
        best = cand;
        bestUsed = used;
      }
    }
    return best;
  }

  private serveWaiters(): void {
    while (this.waiters.length > 0) {
      const s = this.pickIdle();
      if (!s) return;
      const w = this.waiters.shift()!;
      w.cancel();
      this.take(s, w.key);
      w.resolve(this.lease(s));
    }
  }

  private expireReservations(now: number): void {
    for (const s of [...this.byKey.values()]) {
      if (s.status === 'idle' && s.reservedUntil !== undefined && s.reservedUntil <= now) {
        s.idleSince = s.reservedUntil;
        this.unbind(s);
      }
    }
  }

  private totalIps(): number {
    let n = 0;
    for (const e of this.enis.values()) n += e.ips.size;
    return n;
  }

  private inflight(): number {
    let n = this.creatingIps;
    for (const e of this.enis.values()) n += e.assigning;
    return n;
  }

  private fail(op: string, err: unknown, failWaiters: number): void {
    const now = this.opts.clock.now();
    this.backoffMs = this.backoffMs === 0 ? BACKOFF_MIN_MS : Math.min(BACKOFF_MAX_MS, this.backoffMs * 2);
    this.retryAt = now + this.backoffMs;
    const msg = err instanceof Error ? err.message : String(err);
    this.lastFailure = `${op} failed: ${msg}`;
    this.opts.onEvent?.({ type: 'cloud-error', op, error: msg });
    // The pods that were waiting for this call get "try again later".
    const doomed = this.waiters.splice(0, Math.max(0, Math.min(this.waiters.length, failWaiters)));
    for (const w of doomed) {
      w.cancel();
      w.reject(new PoolExhaustedError(`${op} failed: ${msg}`, { cause: err }));
    }
    this.opts.clock.setTimer(this.backoffMs, () => this.kick());
  }

  private succeeded(): void {
    this.backoffMs = 0;
    this.retryAt = 0;
    this.lastFailure = undefined;
  }

  private grow(want: number): void {
    let left = Math.min(want, this.capacity - this.totalIps() - this.inflight());
    const batch = this.opts.assignBatch ?? 10;
    const perEni = this.opts.quota.ipsPerEni;
    // Secondary IPs on ENIs with room, fullest first. Room on an ENI with an
    // assignment in flight is counted (so no ENI is created for it) but asked
    // for on the next pass, when that call has returned.
    const enis = [...this.enis.values()].filter((e) => !e.deleting).sort((a, b) => b.ips.size - a.ips.size);
    for (const e of enis) {
      if (left <= 0) return;
      const room = perEni - e.ips.size - e.assigning;
      if (room <= 0) continue;
      const n = Math.min(room, left, batch);
      left -= n;
      if (e.assigning === 0) this.assign(e, n);
    }
    // New ENIs for the rest, one creation at a time, with up to a full ENI of IPs.
    if (left > 0 && this.creating === 0 && this.enis.size < this.maxEnis) this.createEni(Math.min(left, perEni));
  }

  private assign(e: EniState, n: number): void {
    e.assigning += n;
    const waitersBefore = this.waiters.length;
    this.opts.cloud.assignIps(e.info.eniId, n).then(
      (ips) => {
        e.assigning -= n;
        this.succeeded();
        const now = this.opts.clock.now();
        for (const a of ips) e.ips.set(a, { ip: a, eniId: e.info.eniId, status: 'idle', idleSince: now });
        this.acquiredSinceStart += ips.length;
        this.opts.onEvent?.({ type: 'ips-assigned', eniId: e.info.eniId, ips: ips.length });
        this.serveWaiters();
        this.kick();
      },
      (err) => {
        e.assigning -= n;
        this.fail(`assign ${n} IPs on ${e.info.eniId}`, err, Math.min(n, waitersBefore));
      },
    );
  }

  private async vswitches(): Promise<VSwitchInfo[]> {
    const now = this.opts.clock.now();
    if (this.vswCache && now - this.vswCache.at < VSW_CACHE_MS) return this.vswCache.list;
    const ids = this.opts.config.vswitches[this.opts.zone] ?? this.opts.defaultVSwitches ?? [];
    const list = ids.length ? await this.opts.cloud.describeVSwitches(ids) : [];
    this.vswCache = { at: now, list };
    return list;
  }

  private createEni(ipCount: number): void {
    this.creating++;
    this.creatingIps += ipCount;
    const waitersBefore = this.waiters.length;
    let vswitchId = '';
    const run = async (): Promise<EniInfo> => {
      const now = this.opts.clock.now();
      const all = await this.vswitches();
      const usable = all.filter((v) => (this.vswCoolUntil.get(v.id) ?? 0) <= now);
      const vsw = pickVSwitch(usable, this.opts.config.vswitchPolicy, ipCount, this.opts.random ?? Math.random);
      if (!vsw)
        throw new PoolExhaustedError(
          `no vSwitch in zone ${this.opts.zone} with free IPs (candidates: ${all.map((v) => `${v.id}=${v.available}`).join(', ') || 'none'})`,
        );
      vswitchId = vsw.id;
      return this.opts.cloud.createEni({ vswitchId: vsw.id, securityGroups: this.opts.config.securityGroups, ipCount });
    };
    run().then(
      (info) => {
        this.creating--;
        this.creatingIps -= ipCount;
        this.succeeded();
        const now = this.opts.clock.now();
        const st: EniState = { info, ips: new Map(), assigning: 0, deleting: false };
        for (const a of info.ips) st.ips.set(a, { ip: a, eniId: info.eniId, status: 'idle', idleSince: now });
        this.enis.set(info.eniId, st);
        this.acquiredSinceStart += info.ips.length;
        if (this.vswCache) {
          const v = this.vswCache.list.find((x) => x.id === info.vswitchId);
          if (v) v.available = Math.max(0, v.available - info.ips.length);
        }
        this.opts.onEvent?.({ type: 'eni-created', eniId: info.eniId, vswitchId: info.vswitchId, ips: info.ips.length });
        this.serveWaiters();
        this.kick();
      },
      (err) => {
        this.creating--;
        this.creatingIps -= ipCount;
        if (vswitchId && isVSwitchError(err)) this.vswCoolUntil.set(vswitchId, this.opts.clock.now() + BACKOFF_MAX_MS);
        this.vswCache = undefined;
        this.fail(`create ENI${vswitchId ? ` in ${vswitchId}` : ''}`, err, Math.min(ipCount, waitersBefore));
      },
    );
  }

  /**
   * Returns `n` of `candidates` (free idle IPs) to the cloud: whole ENIs
   * whose IPs are all free first (detach + delete, above min_eni), then
   * secondary IPs of the least used ENIs. The primary IP of an ENI that stays
   * is never unassigned.
   */
  private shrink(candidates: IpState[], n: number): void {
    const cand = new Set(candidates);
    const byEni = new Map<string, IpState[]>();
    for (const s of candidates) byEni.set(s.eniId, [...(byEni.get(s.eniId) ?? []), s]);
    const order = [...byEni.keys()].sort((a, b) => this.usedOn(a) - this.usedOn(b) || byEni.get(b)!.length - byEni.get(a)!.length);
    let left = n;
    let enisLeft = this.enis.size;
    for (const id of order) {
      if (left <= 0) break;
      const e = this.enis.get(id)!;
      const mine = byEni.get(id)!;
      const whole = mine.length === e.ips.size && e.assigning === 0;
      if (whole && mine.length <= left && enisLeft > this.opts.config.minEni) {
        enisLeft--;
        left -= mine.length;
        this.deleteEni(e);
        continue;
      }
      const sec = mine.filter((s) => s.ip !== e.info.primaryIp && cand.has(s)).slice(0, left);
      if (sec.length === 0) continue;
      left -= sec.length;
      this.unassign(e, sec);
    }
  }

  private usedOn(eniId: string): number {
    let n = 0;
    for (const s of this.enis.get(eniId)!.ips.values()) if (s.status !== 'idle' || s.owner !== undefined) n++;
    return n;
  }

  private unassign(e: EniState, states: IpState[]): void {
    for (const s of states) s.status = 'releasing';
    const ips = states.map((s) => s.ip);
    this.opts.cloud.unassignIps(e.info.eniId, ips).then(
      () => {
        for (const a of ips) e.ips.delete(a);
        this.opts.onEvent?.({ type: 'ips-released', eniId: e.info.eniId, ips: ips.length });
        this.kick();
      },
      (err) => {
        for (const s of states) s.status = 'idle';
        this.fail(`unassign ${ips.length} IPs on ${e.info.eniId}`, err, 0);
      },
    );
  }

  private deleteEni(e: EniState): void {
    e.deleting = true;
    for (const s of e.ips.values()) s.status = 'releasing';
    this.opts.cloud.deleteEni(e.info.eniId).then(
      () => {
        this.enis.delete(e.info.eniId);
        this.opts.onEvent?.({ type: 'eni-deleted', eniId: e.info.eniId });
        this.kick();
      },
      (err) => {
        e.deleting = false;
        for (const s of e.ips.values()) s.status = 'idle';
        this.fail(`delete ENI ${e.info.eniId}`, err, 0);
      },
    );
  }
}
