/**
 * One-time provisioning (the Provisioner of CAST AI's gcp-cni): reserve an internal range (Network Connectivity API,
 * default a /16 inside 10.0.0.0/8), add it to the subnet as the secondary range `live` (subnetworks.patch with
 * the subnet's fingerprint; 412 -> re-read), install the CRDs and create or update the IPPool. Every step first
 * looks at what exists, so running it again changes nothing.
 */
import { GceClient, GceError, type InternalRange } from './gce';
import { isAlreadyExists, isNotFound, type KubeLite } from '@cnikit/kube/lite';
import { crds } from './crds';
import { poolPath, refreshPoolStatus } from './allocator';
import { API_VERSION, POOL_PLURAL, type IPPool } from './types';
import { sleep } from '@cnikit/netlib/retry';

export interface ProvisionOptions {
  gce: GceClient;
  kube: KubeLite;
  region: string;
  subnet: string;
  rangeName?: string;
  prefixLength?: number;
  targetCidrRange?: string;
  internalRangeId?: string;
  poolName?: string;
  installCrds?: boolean;
  log?: (msg: string) => void;
}

export interface ProvisionReport {
  cidr: string;
  pool: string;
  createdRange: boolean;
  patchedSubnet: boolean;
  createdPool: boolean;
}

export async function ensureCrds(kube: KubeLite, timeoutMs = 30_000): Promise<void> {
  for (const crd of crds) {
    const p = `/apis/apiextensions.k8s.io/v1/customresourcedefinitions`;
    try {
      await kube.request('POST', p, crd);
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
    }
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const cur = await kube.request<{ status?: { conditions?: { type: string; status: string }[] } }>('GET', `${p}/${crd.metadata.name}`);
      if (cur.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True')) break;
      if (Date.now() > deadline) throw new Error(`provisioner: CRD ${crd.metadata.name} not Established after ${timeoutMs} ms`);
      await sleep(100);
    }
  }
}

export async function provision(o: ProvisionOptions): Promise<ProvisionReport> {
  const log = o.log ?? ((): void => undefined);
  const rangeName = o.rangeName ?? 'live';
  const rangeId = o.internalRangeId ?? `gcp-ipam-${o.subnet}-${rangeName}`.slice(0, 63);
  const poolName = o.poolName ?? `ippool-${o.subnet}`;
  const report: ProvisionReport = { cidr: '', pool: poolName, createdRange: false, patchedSubnet: false, createdPool: false };

  for (let attempt = 1; ; attempt++) {
    const sn = await o.gce.getSubnetwork(o.region, o.subnet);
    const existing = sn.secondaryIpRanges?.find((r) => r.rangeName === rangeName);
    if (existing?.ipCidrRange) {
      report.cidr = existing.ipCidrRange;
      log(`subnet ${o.subnet} already has secondary range ${rangeName} = ${existing.ipCidrRange}`);
      break;
    }
    let ir: InternalRange;
    try {
      ir = await o.gce.getInternalRange(rangeId);
    } catch (err) {
      if (!(err instanceof GceError && err.status === 404)) throw err;
      ir = await o.gce.createInternalRange(rangeId, {
        network: sn.network ?? '',
        prefixLength: o.prefixLength ?? 16,
        targetCidrRange: [o.targetCidrRange ?? '10.0.0.0/8'],
        usage: 'FOR_VPC',
        peering: 'FOR_SELF',
        description: `gcp-ipam pod IPs (${o.subnet}/${rangeName})`,
      });
      report.createdRange = true;
      log(`reserved internal range ${rangeId} = ${ir.ipCidrRange}`);
    }
    try {
      await o.gce.patchSubnetwork(o.region, o.subnet, {
        fingerprint: sn.fingerprint,
        secondaryIpRanges: [
          ...(sn.secondaryIpRanges ?? []),
          { rangeName, reservedInternalRange: `https://networkconnectivity.googleapis.com/v1/${ir.name}` },
        ],
      });
    } catch (err) {
      if (err instanceof GceError && err.stale && attempt < 5) continue;
      throw err;
    }
    report.patchedSubnet = true;
    report.cidr = ir.ipCidrRange ?? '';
    log(`added secondary range ${rangeName} to ${o.subnet}`);
    break;
  }

  if (o.installCrds ?? true) await ensureCrds(o.kube);
  const spec = {
    cidr: report.cidr,
    subnet: `projects/${o.gce.project}/regions/${o.region}/subnetworks/${o.subnet}`,
    secondaryRangeName: rangeName,
  };
  let pool: IPPool;
  try {
    pool = await o.kube.request<IPPool>('GET', poolPath(poolName));
    if (pool.spec.cidr !== spec.cidr)
      throw new Error(`provisioner: IPPool ${poolName} exists with cidr ${pool.spec.cidr}, the subnet's range is ${spec.cidr}`);
  } catch (err) {
    if (!isNotFound(err)) throw err;
    pool = await o.kube.request<IPPool>('POST', `/apis/${API_VERSION}/${POOL_PLURAL}`, {
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: poolName },
      spec,
    });
    report.createdPool = true;
    log(`created IPPool ${poolName} (${spec.cidr})`);
  }
  await refreshPoolStatus(o.kube, pool);
  return report;
}
