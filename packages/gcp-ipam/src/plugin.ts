/**
 * gcp-ipam's CNI verbs. ADD: claim an IP (one IPAllocation object), attach it as a /32 alias through the node's
 * coalescer, return ip/gateway/routes; with live.cast.ai/ip, verify and run the migration instead. DEL: release
 * (alias first, then the allocation) unless the allocation moved to another pod or the pod is marked move-out.
 * CHECK: allocation still ours and alias attached. GC: release what the runtime no longer knows. STATUS: pool
 * reachable.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { CniError, TransientError, createLogger, ip as ipmath, validAttachments, type CmdArgs, type Result } from '@cnikit/netlib';
import {
  claim,
  deleteAllocation,
  gatewayOf,
  getAllocation,
  getPool,
  listAllocations,
  refreshPoolStatus,
  replaceAllocation,
  type Owner,
} from './allocator';
import { ApiError } from '@cnikit/kube/lite';
import { controllerUid, getPod, makeCtx, type Ctx, type PodLite } from './context';
import { parseIpamConfig, type IpamConfig } from './config';
import { migrateIn } from './migration';
import { ANN_IP, ANN_MOVE_OUT_IP, type IPAllocation, type IPPool } from './types';

async function withCtx<T>(a: CmdArgs, fn: (ctx: Ctx) => Promise<T>): Promise<T> {
  const cfg = parseIpamConfig(a.conf);
  const log = createLogger({
    file: cfg.logFile,
    module: 'gcp-ipam',
    fields: { containerId: a.containerId, ifName: a.ifName, command: a.command },
  });
  const ctx = makeCtx(cfg);
  const t0 = Date.now();
  try {
    const r = await fn(ctx);
    log.info('done', { ms: Date.now() - t0, ips: (r as Result | undefined)?.ips?.map((x) => x.address) });
    return r;
  } catch (err) {
    const e = toCniError(err);
    log.error('failed', { ms: Date.now() - t0, error: (e as Error).message, code: (e as CniError).code });
    throw e;
  } finally {
    ctx.close();
  }
}

/** Kube/transport failures are transient (11); CniErrors pass; the rest keep their message under code 999. */
function toCniError(err: unknown): unknown {
  if (err instanceof CniError) return err;
  const e = err as Error & { status?: number };
  if (err instanceof ApiError && err.status >= 500)
    return new TransientError('gcp-ipam: API server unavailable', e.message, { cause: err });
  if (e?.name === 'GceError' && (e as unknown as { rateLimited: boolean }).rateLimited)
    return new TransientError('gcp-ipam: GCE rate limit exceeded, try again', e.message, { cause: err });
  if (e?.name === 'GceError' && (e as unknown as { transient: boolean }).transient)
    return new TransientError('gcp-ipam: cloud API unavailable, try again', e.message, { cause: err });
  if (e instanceof Error && /ECONNREFUSED|ETIMEDOUT|ECONNRESET|timeout/.test(e.message))
    return new TransientError('gcp-ipam: unreachable', e.message, { cause: err });
  return err;
}

// node-local record: container -> allocation (DEL/CHECK/GC find their IP without a list)

/** `network` is the conflist's name (absent in records written before it was kept): GC is per network. */
interface LocalRecord {
  allocation: string;
  ip: string;
  pool: string;
  network?: string;
}
const recordPath = (cfg: IpamConfig, containerId: string, ifName: string): string =>
  path.join(cfg.stateDir, 'containers', `${containerId}_${ifName}`);
function writeRecord(cfg: IpamConfig, a: CmdArgs, rec: LocalRecord): void {
  const file = recordPath(cfg, a.containerId, a.ifName);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(`${file}.tmp`, JSON.stringify({ ...rec, network: a.conf.name }));
  fs.renameSync(`${file}.tmp`, file);
}
function readRecord(cfg: IpamConfig, containerId: string, ifName: string): LocalRecord | undefined {
  try {
    return JSON.parse(fs.readFileSync(recordPath(cfg, containerId, ifName), 'utf8')) as LocalRecord;
  } catch {
    return undefined;
  }
}
function removeRecord(cfg: IpamConfig, containerId: string, ifName: string): void {
  fs.rmSync(recordPath(cfg, containerId, ifName), { force: true });
}

function ownerOf(ctx: Ctx, a: CmdArgs, pod: PodLite | undefined): Owner {
  const k8s = Boolean(a.args.K8S_POD_NAMESPACE && a.args.K8S_POD_NAME); // podman sends K8S_POD_NAME alone
  return {
    podName: k8s ? a.args.K8S_POD_NAME! : '',
    podNamespace: k8s ? a.args.K8S_POD_NAMESPACE! : '',
    podUID: pod?.metadata.uid ?? a.args.K8S_POD_UID ?? '',
    podOwnerUID: controllerUid(pod),
    nodeName: ctx.cfg.nodeName,
    instance: ctx.cfg.instance,
    zone: ctx.cfg.zone,
    containerID: a.containerId,
    ifName: a.ifName,
  };
}

export function resultFor(a: CmdArgs, cfg: IpamConfig, pool: IPPool, ip: string): Result {
  const prefix = ipmath.parseCidr(pool.spec.cidr).prefix;
  const gw = gatewayOf(pool.spec.cidr);
  return {
    cniVersion: a.conf.cniVersion,
    ips: [{ address: `${ip}/${prefix}`, gateway: gw }],
    routes: cfg.routes.map((r) => ({ dst: r.dst, gw })),
  };
}

export async function add(a: CmdArgs): Promise<Result> {
  return withCtx(a, async (ctx) => {
    const ns = a.args.K8S_POD_NAMESPACE;
    const name = a.args.K8S_POD_NAME;
    const [pod, pool] = await Promise.all([
      ns && name ? getPod(ctx.kube, ns, name) : Promise.resolve(undefined),
      getPool(ctx.kube, ctx.cfg.pool),
    ]);
    const owner = ownerOf(ctx, a, pod);
    if (pod?.metadata.annotations?.[ANN_IP] !== undefined) {
      const alloc = await migrateIn(ctx, pool, pod, owner);
      writeRecord(ctx.cfg, a, { allocation: alloc.metadata.name, ip: alloc.spec.ip, pool: pool.metadata.name });
      return resultFor(a, ctx.cfg, pool, alloc.spec.ip);
    }
    const { alloc } = await claim(ctx.kube, pool, owner);
    try {
      writeRecord(ctx.cfg, a, { allocation: alloc.metadata.name, ip: alloc.spec.ip, pool: pool.metadata.name });
      await ctx.coalescer.apply({ op: 'add', ip: alloc.spec.ip, rangeName: pool.spec.secondaryRangeName });
    } catch (err) {
      // undo in reverse: the alias was not attached (or its call failed): free the IP again
      removeRecord(ctx.cfg, a.containerId, a.ifName);
      await deleteAllocation(ctx.kube, alloc).catch(() => undefined);
      throw err;
    }
    return resultFor(a, ctx.cfg, pool, alloc.spec.ip);
  });
}

async function findOwnAllocation(ctx: Ctx, containerId: string, ifName: string): Promise<IPAllocation | undefined> {
  const rec = readRecord(ctx.cfg, containerId, ifName);
  if (rec) return getAllocation(ctx.kube, rec.allocation);
  const mine = await listAllocations(ctx.kube, { pool: ctx.cfg.pool, node: ctx.cfg.nodeName });
  return mine.find((x) => x.spec.containerID === containerId && x.spec.ifName === ifName);
}

/** Releases this container's IP unless it moved away or is moving out. Idempotent. */
async function release(ctx: Ctx, containerId: string, ifName: string, opts: { checkMoveOut: boolean }): Promise<void> {
  const alloc = await findOwnAllocation(ctx, containerId, ifName);
  if (!alloc || alloc.spec.containerID !== containerId || alloc.spec.ifName !== ifName) {
    removeRecord(ctx.cfg, containerId, ifName); // gone, or migrated to another pod: not ours to release
    return;
  }
  if (opts.checkMoveOut && alloc.spec.podName && alloc.spec.podNamespace) {
    const pod = await getPod(ctx.kube, alloc.spec.podNamespace, alloc.spec.podName);
    if (pod && pod.metadata.uid === alloc.spec.podUID && pod.metadata.annotations?.[ANN_MOVE_OUT_IP] === alloc.spec.ip) {
      // keep the IP (and its alias, until the destination detaches it) for the pod that replaces this one
      await replaceAllocation(ctx.kube, { ...alloc, spec: { ...alloc.spec, movingOut: true } });
      removeRecord(ctx.cfg, containerId, ifName);
      return;
    }
  }
  if (alloc.spec.instance === ctx.cfg.instance) await ctx.coalescer.apply({ op: 'remove', ip: alloc.spec.ip });
  await deleteAllocation(ctx.kube, alloc);
  removeRecord(ctx.cfg, containerId, ifName);
}

export async function del(a: CmdArgs): Promise<void> {
  return withCtx(a, (ctx) => release(ctx, a.containerId, a.ifName, { checkMoveOut: true }));
}

export async function check(a: CmdArgs): Promise<void> {
  return withCtx(a, async (ctx) => {
    const alloc = await findOwnAllocation(ctx, a.containerId, a.ifName);
    if (!alloc || alloc.spec.containerID !== a.containerId) {
      throw new CniError(
        122,
        'gcp-ipam: no allocation for this container',
        `container ${a.containerId} ifname ${a.ifName} in pool ${ctx.cfg.pool}`,
      );
    }
    const inst = await ctx.gce.getInstance(ctx.cfg.zone, ctx.cfg.instance);
    const nic = inst.networkInterfaces.find((n) => n.name === ctx.cfg.networkInterface);
    if (!nic?.aliasIpRanges?.some((r) => r.ipCidrRange === `${alloc.spec.ip}/32`)) {
      throw new CniError(
        123,
        'gcp-ipam: alias IP not attached',
        `${alloc.spec.ip}/32 missing on ${ctx.cfg.instance}/${ctx.cfg.networkInterface}`,
      );
    }
  });
}

/**
 * Whether a node-local record belongs to the network being garbage-collected. Several gcp-ipam networks may
 * share one stateDir, and `cni.dev/valid-attachments` lists the attachments of this network only (as
 * host-local keeps one store per network): another network's live attachments are not in it.
 */
function ofThisNetwork(ctx: Ctx, a: CmdArgs, file: string): boolean {
  const i = file.lastIndexOf('_');
  const rec = readRecord(ctx.cfg, file.slice(0, i), file.slice(i + 1));
  if (!rec) return false; // unreadable or just removed: nothing known to release
  return rec.pool === ctx.cfg.pool && (rec.network === undefined || rec.network === a.conf.name);
}

export async function gc(a: CmdArgs): Promise<void> {
  const valid = new Set(validAttachments(a.conf).map((x) => `${x.containerID}_${x.ifname}`));
  return withCtx(a, async (ctx) => {
    const errors: string[] = [];
    const seen = new Set<string>();
    const dir = path.join(ctx.cfg.stateDir, 'containers');
    for (const f of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
      if (f.endsWith('.tmp') || valid.has(f)) continue;
      seen.add(f); // an allocation behind another network's record is not this network's to release either
      if (!ofThisNetwork(ctx, a, f)) continue;
      const i = f.lastIndexOf('_');
      await release(ctx, f.slice(0, i), f.slice(i + 1), { checkMoveOut: true }).catch((e: Error) => errors.push(`${f}: ${e.message}`));
    }
    for (const alloc of await listAllocations(ctx.kube, { pool: ctx.cfg.pool, node: ctx.cfg.nodeName })) {
      const key = `${alloc.spec.containerID}_${alloc.spec.ifName}`;
      if (
        valid.has(key) ||
        seen.has(key) ||
        alloc.spec.phase !== 'Allocated' ||
        alloc.spec.movingOut ||
        alloc.spec.nodeName !== ctx.cfg.nodeName
      )
        continue;
      await release(ctx, alloc.spec.containerID, alloc.spec.ifName, { checkMoveOut: true }).catch((e: Error) =>
        errors.push(`${key}: ${e.message}`),
      );
    }
    await refreshPoolStatus(ctx.kube, await getPool(ctx.kube, ctx.cfg.pool)).catch((e: Error) => errors.push(`pool status: ${e.message}`));
    if (errors.length) throw new CniError(124, 'gcp-ipam: GC incomplete', errors.join('; '));
  });
}

/**
 * STATUS: the API server and the pool answer, and GCE is not refusing this node's alias updates. The counters are
 * not consulted (they are only as fresh as the controller's last write, and a stale 0 must not take the node's
 * network down: ADD answers 110 instead).
 */
export async function status(a: CmdArgs): Promise<void> {
  const cfg = parseIpamConfig(a.conf);
  let ctx: Ctx | undefined;
  try {
    ctx = makeCtx(cfg, { gceAttempts: 1 });
    await getPool(ctx.kube, cfg.pool);
  } catch (err) {
    ctx?.close();
    if (err instanceof CniError) throw err;
    throw new CniError(50, 'gcp-ipam: not available', (err as Error).message);
  }
  try {
    await cloudStatus(ctx);
  } finally {
    ctx.close();
  }
}

/**
 * Fails (50) while the node's last alias update met an outage: throttled until the quota refills, or GCE still
 * not answering a read of the node's VM (asked only after a failure: a healthy node costs the cloud nothing).
 */
async function cloudStatus(ctx: Ctx): Promise<void> {
  const h = ctx.coalescer.health();
  if (!h || h.ok) return;
  const since = `${Math.round((Date.now() - h.at) / 1000)} s ago`;
  if (h.rateLimited) {
    if (Date.now() < (h.retryAt ?? 0)) throw new CniError(50, h.msg ?? 'gcp-ipam: GCE rate limit exceeded', `${since}: ${h.details ?? ''}`);
    return;
  }
  try {
    await ctx.gce.getInstance(ctx.cfg.zone, ctx.cfg.instance);
  } catch (err) {
    throw new CniError(50, 'gcp-ipam: cloud API unavailable', `${(err as Error).message} (last alias update ${since}: ${h.details ?? ''})`);
  }
  ctx.coalescer.recordHealth();
}
