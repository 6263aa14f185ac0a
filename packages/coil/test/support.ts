// Shared by the Coil test files: the cluster started by globalSetup, Coil's CRDs installed once, polling.
import { LeaderRunner, Nodes, ResourceClient, installCrd, type KubeTransport, type Node, type Startable } from '@cnikit/kube';
import { testCluster, transportFor } from '@cnikit/kube-testing';
import { coilCrds } from '../src/api/crds';
import { AddressBlocks, AddressPools, BlockRequests, type AddressBlock, type AddressPool, type BlockRequest } from '../src/api/types';

export const cluster = testCluster();

export function transport(): KubeTransport {
  return transportFor(cluster);
}

let installed: Promise<void> | undefined;
export function installCoilCrds(t: KubeTransport): Promise<void> {
  installed ??= (async () => {
    for (const crd of coilCrds()) await installCrd(t, crd);
  })();
  return installed;
}

export function clients(t: KubeTransport): {
  pools: ResourceClient<AddressPool>;
  blocks: ResourceClient<AddressBlock>;
  requests: ResourceClient<BlockRequest>;
  nodes: ResourceClient<Node>;
} {
  return {
    pools: new ResourceClient(t, AddressPools),
    blocks: new ResourceClient(t, AddressBlocks),
    requests: new ResourceClient(t, BlockRequests),
    nodes: new ResourceClient(t, Nodes),
  };
}

export async function createNode(t: KubeTransport, name: string, internalIP = '10.0.0.1', ipv6?: string): Promise<Node> {
  const nodes = new ResourceClient(t, Nodes);
  await nodes.create({ metadata: { name } });
  const addresses = [{ type: 'InternalIP', address: internalIP }, ...(ipv6 ? [{ type: 'InternalIP', address: ipv6 }] : [])];
  return nodes.patchStatus(name, { status: { addresses } });
}

export { eventually } from '@cnikit/kube-testing';

let seq = 0;
/** A short unique name (pool names end up in block names and request names). */
export function uname(prefix: string): string {
  seq++;
  return `${prefix}${process.pid.toString(36)}${Date.now().toString(36).slice(-3)}${seq}`;
}

/**
 * A LeaderRunner for the leader-election tests: a short lease (4 s, renew deadline 3 s, retry 0.5 s) so a
 * standby takes over within seconds; a failed start fails the test.
 */
export function testRunner(task: Startable, t: KubeTransport, lease: string, id: string, onLost: () => void): LeaderRunner {
  return new LeaderRunner(task, {
    transport: t,
    namespace: 'default',
    name: lease,
    identity: id,
    leaseDurationMs: 4000,
    renewDeadlineMs: 3000,
    retryPeriodMs: 500,
    onLost,
    onStartFailed: (err) => {
      throw err;
    },
  });
}
