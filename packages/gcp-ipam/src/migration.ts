/**
 * Pod IP live migration. The destination pod carries live.cast.ai/ip (the IP it wants) and
 * live.cast.ai/original-instance (the VM the IP is attached to). Unlike CAST AI's gcp-cni, the claim is verified
 * against the API server before anything moves:
 *   - the IP is a valid host address of this pool, and allocated;
 *   - the allocation sits on the named instance, in the destination pod's namespace;
 *   - its owner pod is marked live.cast.ai/move-out-ip=<that IP> (or is gone after a DEL that saw the mark);
 *   - the destination replaces it: same controller (ownerReference uid) or the same pod name.
 * Then: allocation -> Migrating (resourceVersion-guarded: one winner), detach from the source VM, attach here
 * (through the node's coalescer), allocation -> Allocated under the new owner. If the attach fails the alias
 * goes back on the source and the allocation back to its source owner; if the detach fails nothing moved.
 */
import { CniError, TransientError, ip as ipmath } from '@cnikit/netlib';
import { reservedIps, replaceAllocation, getAllocation, type Owner } from './allocator';
import { applyChanges } from './coalescer';
import { isConflict } from '@cnikit/kube/lite';
import { controllerUid, getPod, type Ctx, type PodLite } from './context';
import {
  ANN_IP,
  ANN_MOVE_OUT_IP,
  ANN_ORIGINAL_INSTANCE,
  LABEL_NODE,
  allocationName,
  labelValue,
  type IPAllocation,
  type IPPool,
} from './types';

/** Code 121: the migration claim does not hold; nothing was changed. */
export class MigrationRefusedError extends CniError {
  constructor(reason: string, details: string) {
    super(121, `gcp-ipam: migration refused: ${reason}`, details);
    this.name = 'MigrationRefusedError';
  }
}

const GCE_NAME_RE = /^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/;
const ZONE_RE = /^[a-z]+-[a-z]+[0-9]+-[a-z]$/;

/** "vm", "zone/vm" or "zones/zone/instances/vm" (optionally with a projects/... prefix) -> { zone?, instance }. */
export function parseInstanceRef(v: string): { zone?: string; instance: string } | undefined {
  const m = v.match(/^(?:(?:projects\/[a-z][-a-z0-9]{4,28}[a-z0-9]\/)?zones\/([^/]+)\/instances\/([^/]+)|([^/]+)\/([^/]+)|([^/]+))$/);
  if (!m) return undefined;
  const zone = m[1] ?? m[3];
  const instance = (m[2] ?? m[4] ?? m[5])!;
  if (!GCE_NAME_RE.test(instance) || (zone !== undefined && !ZONE_RE.test(zone))) return undefined;
  return zone ? { zone, instance } : { instance };
}

const show = (v: string): string => JSON.stringify(v.length > 80 ? `${v.slice(0, 80)}...` : v);

export async function migrateIn(ctx: Ctx, pool: IPPool, pod: PodLite, owner: Owner): Promise<IPAllocation> {
  const claim = readClaim(pool, pod);
  const name = allocationName(pool.metadata.name, claim.want);
  const alloc = await getAllocation(ctx.kube, name);
  if (!alloc)
    throw new MigrationRefusedError(
      `${claim.want} is not allocated: nothing to move`,
      `pod ${claim.podRef}, IPAllocation ${name} not found`,
    );
  if (alloc.spec.containerID === owner.containerID && alloc.spec.podUID === owner.podUID && alloc.spec.phase === 'Allocated') return alloc; // repeated ADD
  if (alloc.spec.phase === 'Migrating')
    throw new TransientError(
      'gcp-ipam: migration in progress',
      `${claim.want} is being moved by pod ${alloc.spec.podNamespace}/${alloc.spec.podName}`,
    );
  const srcZone = alloc.spec.zone || ctx.cfg.zone;
  checkSourceAttachment(alloc, pod, claim, srcZone);
  await checkReplacesOwner(ctx, alloc, pod, claim);

  const move: Move = {
    ctx,
    pool,
    want: claim.want,
    name,
    srcZone,
    before: alloc.spec,
    beforeLabels: alloc.metadata.labels ?? {},
    sameVm: alloc.spec.instance === ctx.cfg.instance && srcZone === ctx.cfg.zone,
  };
  const cur = await claimMove(move, alloc, owner);
  if (!move.sameVm) await detachFromSource(move);
  await attachHere(move);
  const { migration: _m, ...rest } = cur.spec;
  void _m;
  return replaceAllocation(ctx.kube, { ...cur, spec: { ...rest, phase: 'Allocated' } });
}

/** What the destination pod's annotations claim: the IP and the instance it sits on. */
interface Claim {
  want: string;
  podRef: string;
  /** The annotation as written, for messages. */
  fromRaw: string | undefined;
  from: { zone?: string; instance: string };
}

/** The annotations are well formed: an IPv4 host address of this pool, and an instance reference. */
function readClaim(pool: IPPool, pod: PodLite): Claim {
  const ann = pod.metadata.annotations ?? {};
  const want = ann[ANN_IP]!;
  const podRef = `${pod.metadata.namespace}/${pod.metadata.name}`;
  if (!ipmath.isValidIp(want) || ipmath.familyOf(want) !== 4 || want.includes('/')) {
    throw new MigrationRefusedError(`${ANN_IP} is not an IPv4 address`, `pod ${podRef}: ${ANN_IP}=${show(want)}`);
  }
  if (!ipmath.contains(pool.spec.cidr, want) || reservedIps(pool.spec.cidr).has(want)) {
    throw new MigrationRefusedError(`${want} is not a host address of IPPool ${pool.metadata.name} (${pool.spec.cidr})`, `pod ${podRef}`);
  }
  const fromRaw = ann[ANN_ORIGINAL_INSTANCE];
  const from = fromRaw === undefined ? undefined : parseInstanceRef(fromRaw);
  if (!from)
    throw new MigrationRefusedError(
      `${ANN_ORIGINAL_INSTANCE} missing or not an instance name`,
      `pod ${podRef}: ${ANN_ORIGINAL_INSTANCE}=${show(fromRaw ?? '')}`,
    );
  return { want, podRef, fromRaw, from };
}

/** The allocation sits on the claimed instance, in the claimant's namespace. */
function checkSourceAttachment(alloc: IPAllocation, pod: PodLite, claim: Claim, srcZone: string): void {
  const { want, from } = claim;
  if (alloc.spec.instance !== from.instance || (from.zone && from.zone !== srcZone)) {
    throw new MigrationRefusedError(
      `${want} is not attached to ${claim.fromRaw}`,
      `it is on ${srcZone}/${alloc.spec.instance} (pod ${alloc.spec.podNamespace}/${alloc.spec.podName})`,
    );
  }
  if (alloc.spec.podNamespace !== pod.metadata.namespace) {
    throw new MigrationRefusedError(
      `${want} belongs to another namespace`,
      `owner ${alloc.spec.podNamespace}/${alloc.spec.podName}, claimant ${claim.podRef}`,
    );
  }
}

/**
 * The owner agreed to give the IP away (its pod is marked move-out, or was marked before it went), and the
 * claimant replaces it: same controller, or the same pod name.
 */
async function checkReplacesOwner(ctx: Ctx, alloc: IPAllocation, pod: PodLite, claim: Claim): Promise<void> {
  const { want, podRef } = claim;
  const src = alloc.spec.podName ? await getPod(ctx.kube, alloc.spec.podNamespace, alloc.spec.podName) : undefined;
  const srcIsOwner = src !== undefined && src.metadata.uid === alloc.spec.podUID;
  if (srcIsOwner) {
    if (src.metadata.annotations?.[ANN_MOVE_OUT_IP] !== want) {
      throw new MigrationRefusedError(
        `source pod ${alloc.spec.podNamespace}/${alloc.spec.podName} is not marked ${ANN_MOVE_OUT_IP}=${want}`,
        `claimant ${podRef}`,
      );
    }
  } else if (!alloc.spec.movingOut) {
    throw new MigrationRefusedError(
      `the owner of ${want} was not marked ${ANN_MOVE_OUT_IP}`,
      `owner ${alloc.spec.podNamespace}/${alloc.spec.podName} (uid ${alloc.spec.podUID}) is gone, claimant ${podRef}`,
    );
  }
  const srcController = srcIsOwner ? controllerUid(src) : alloc.spec.podOwnerUID;
  const replaces = (srcController !== undefined && srcController === controllerUid(pod)) || alloc.spec.podName === pod.metadata.name;
  if (!replaces) {
    throw new MigrationRefusedError(
      `pod ${podRef} does not replace ${alloc.spec.podNamespace}/${alloc.spec.podName}`,
      'neither the same controller nor the same name',
    );
  }
}

/** A move under way: enough to undo it. */
interface Move {
  ctx: Ctx;
  pool: IPPool;
  want: string;
  /** The IPAllocation's name. */
  name: string;
  srcZone: string;
  /** The allocation's spec and labels before the claim, put back when the move fails. */
  before: IPAllocation['spec'];
  beforeLabels: Record<string, string>;
  /** The IP is already on this VM (nothing to detach or put back). */
  sameVm: boolean;
}

/** Allocation -> Migrating under the new owner; one writer wins through the resourceVersion. */
async function claimMove(m: Move, alloc: IPAllocation, owner: Owner): Promise<IPAllocation> {
  const { before } = m;
  try {
    return await replaceAllocation(m.ctx.kube, {
      ...alloc,
      metadata: { ...alloc.metadata, labels: { ...alloc.metadata.labels, [LABEL_NODE]: labelValue(owner.nodeName) } },
      spec: {
        ...before,
        ...owner,
        phase: 'Migrating',
        movingOut: false,
        allocatedAt: before.allocatedAt,
        migration: {
          fromInstance: `${m.srcZone}/${before.instance}`,
          fromPod: `${before.podNamespace}/${before.podName}`,
          fromPodUID: before.podUID,
          startedAt: new Date().toISOString(),
        },
      },
    });
  } catch (err) {
    if (isConflict(err))
      throw new TransientError('gcp-ipam: migration raced with another writer', `IPAllocation ${m.name} changed; retry`, { cause: err });
    throw err;
  }
}

/** Puts the allocation back as it was before the claim (a few tries on conflicts; gone means nothing to restore). */
async function restoreAllocation(m: Move): Promise<void> {
  for (let i = 0; i < 5; i++) {
    const now = await getAllocation(m.ctx.kube, m.name);
    if (!now) return;
    try {
      await replaceAllocation(m.ctx.kube, { ...now, metadata: { ...now.metadata, labels: { ...m.beforeLabels } }, spec: { ...m.before } });
      return;
    } catch (err) {
      if (!isConflict(err)) throw err;
    }
  }
}

/** The alias leaves the source VM; when that fails nothing moved and the allocation goes back. */
async function detachFromSource(m: Move): Promise<void> {
  try {
    await m.ctx.gce.updateAliases(m.srcZone, m.before.instance, m.ctx.cfg.networkInterface, (c) =>
      applyChanges(c, [{ op: 'remove', ip: m.want }]),
    );
  } catch (err) {
    await restoreAllocation(m);
    throw new CniError(
      120,
      'gcp-ipam: migration: detach from source failed, nothing moved',
      `${m.want} from ${m.srcZone}/${m.before.instance}: ${(err as Error).message}`,
      { cause: err },
    );
  }
}

/** The alias comes onto this VM (through the node's coalescer); when that fails it goes back on the source. */
async function attachHere(m: Move): Promise<void> {
  const rangeName = m.pool.spec.secondaryRangeName;
  try {
    await m.ctx.coalescer.apply({ op: 'add', ip: m.want, rangeName });
  } catch (err) {
    let back = 'reattached to the source';
    if (!m.sameVm) {
      try {
        await m.ctx.gce.updateAliases(m.srcZone, m.before.instance, m.ctx.cfg.networkInterface, (c) =>
          applyChanges(c, [{ op: 'add', ip: m.want, rangeName }]),
        );
      } catch (e2) {
        back = `reattach to the source failed too (${(e2 as Error).message}); the allocation stays with the source owner`;
      }
    }
    await restoreAllocation(m);
    throw new CniError(
      120,
      'gcp-ipam: migration: attach failed, IP returned to its source',
      `${m.want}: ${(err as Error).message}; ${back}`,
      {
        cause: err,
      },
    );
  }
}
