/**
 * What `doctor cluster` reads from the API server (Nodes, pods and the live ones' addresses, Coil's AddressPools
 * and AddressBlocks, gcp-ipam's IPAllocations), and its one write: deleting a block whose node is gone, as Coil's controller does when it sees
 * the Node go (the finalizer removed first: no coild is left to remove it).
 */
import { ALLOC_PLURAL, GROUP, VERSION, type IPAllocation } from '@cnikit/gcp-ipam/types';
import type { KubeObject, KubeTransport, Pod, Resource } from '@cnikit/kube';
import type { AllocationFacts, BlockFacts, ClusterFacts, PoolFacts } from './cluster';

type Kube = typeof import('@cnikit/kube');

const COIL_FINALIZER = 'coil.cybozu.com';
const LABEL_POOL = 'coil.cybozu.com/pool';
const LABEL_NODE = 'coil.cybozu.com/node';

interface AddressPool extends KubeObject {
  spec: { blockSizeBits: number; subnets: { ipv4?: string; ipv6?: string }[] };
}
interface AddressBlock extends KubeObject {
  ipv4?: string;
  ipv6?: string;
}

function coilResources(kube: Kube): { pools: Resource<AddressPool>; blocks: Resource<AddressBlock> } {
  const group = 'coil.cybozu.com';
  return {
    pools: kube.defineResource<AddressPool>({ group, version: 'v2', kind: 'AddressPool', plural: 'addresspools', namespaced: false }),
    blocks: kube.defineResource<AddressBlock>({ group, version: 'v2', kind: 'AddressBlock', plural: 'addressblocks', namespaced: false }),
  };
}

/** Coil's pools and blocks; pools undefined when the cluster has no Coil CRDs. */
async function readCoil(kube: Kube, transport: KubeTransport): Promise<{ pools?: PoolFacts[]; blocks: BlockFacts[] }> {
  const r = coilResources(kube);
  let pools: AddressPool[];
  try {
    pools = (await new kube.ResourceClient(transport, r.pools).listAll()).items;
  } catch (err) {
    if (kube.isNotFound(err)) return { blocks: [] };
    throw err;
  }
  const blocks = (await new kube.ResourceClient(transport, r.blocks).listAll()).items;
  return {
    pools: pools.map((p) => ({ name: p.metadata.name ?? '', blockSizeBits: p.spec.blockSizeBits, subnets: p.spec.subnets })),
    blocks: blocks.map((b) => ({
      name: b.metadata.name ?? '',
      pool: b.metadata.labels?.[LABEL_POOL] ?? '',
      node: b.metadata.labels?.[LABEL_NODE] ?? '',
      ...(b.ipv4 ? { ipv4: b.ipv4 } : {}),
      ...(b.ipv6 ? { ipv6: b.ipv6 } : {}),
    })),
  };
}

/** gcp-ipam's allocations (its types.ts: ipam.gcp-cni.cast.ai/v1alpha1); undefined when the cluster has no such CRD. */
async function readAllocations(kube: Kube, transport: KubeTransport): Promise<AllocationFacts[] | undefined> {
  const res = kube.defineResource<IPAllocation & KubeObject>({
    group: GROUP,
    version: VERSION,
    kind: 'IPAllocation',
    plural: ALLOC_PLURAL,
    namespaced: false,
  });
  try {
    return (await new kube.ResourceClient(transport, res).listAll()).items.map((a) => ({
      name: a.metadata.name ?? '',
      pool: a.spec.pool,
      ip: a.spec.ip,
      pod: `${a.spec.podNamespace}/${a.spec.podName}`,
      podUID: a.spec.podUID,
      node: a.spec.nodeName,
      migrating: !!a.spec.movingOut || a.spec.phase === 'Migrating',
    }));
  } catch (err) {
    if (kube.isNotFound(err)) return undefined;
    throw err;
  }
}

export async function readCluster(kubeconfig?: string): Promise<ClusterFacts> {
  const kube = await import('@cnikit/kube');
  const transport = kube.connect({ kubeconfig });
  try {
    const nodes = (await new kube.ResourceClient(transport, kube.Nodes).listAll()).items.map((n) => n.metadata.name ?? '');
    // addresses only of live pods: a deleted pod's status keeps its address after its sandbox is gone
    const live = (p: Pod): boolean => !p.spec.hostNetwork && p.status?.phase === 'Running' && !p.metadata.deletionTimestamp;
    const pods = (await new kube.ResourceClient(transport, kube.Pods).listAll()).items.map((p) => ({
      pod: `${p.metadata.namespace}/${p.metadata.name}`,
      uid: p.metadata.uid,
      node: p.spec.nodeName ?? '',
      ips: live(p) ? (p.status?.podIPs ?? []).map((x) => x.ip) : [],
    }));
    const allocations = await readAllocations(kube, transport);
    return { nodes, pods, ...(await readCoil(kube, transport)), ...(allocations ? { allocations } : {}) };
  } finally {
    transport.close();
  }
}

/** Deletes each block (finalizer first); one result per block, in order. */
export async function deleteBlocks(names: string[], kubeconfig?: string): Promise<{ block: string; ok: boolean; error?: string }[]> {
  const kube = await import('@cnikit/kube');
  const transport = kube.connect({ kubeconfig });
  const client = new kube.ResourceClient(transport, coilResources(kube).blocks);
  const results: { block: string; ok: boolean; error?: string }[] = [];
  try {
    for (const name of names) {
      try {
        const obj = await client.find(name);
        if (obj) {
          await client.delete(name, { ignoreNotFound: true });
          await kube.removeFinalizer(client, obj, COIL_FINALIZER);
        }
        results.push({ block: name, ok: true });
      } catch (err) {
        results.push({ block: name, ok: false, error: err instanceof Error ? err.message : String(err) });
      }
    }
  } finally {
    transport.close();
  }
  return results;
}
