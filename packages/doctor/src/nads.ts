/**
 * Multus NetworkAttachmentDefinitions from the API server, for `doctor conf` (the kube kit is loaded only when
 * NADs are asked for: a conf-dir lint needs no API server).
 */
import type { Nad } from './conf';

interface NadObject {
  metadata: { name: string; namespace?: string };
  spec?: { config?: string };
}

/** Every NAD of every namespace; undefined when the cluster has no NAD CRD (no Multus). */
export async function listNads(kubeconfig?: string): Promise<Nad[] | undefined> {
  const { connect, defineResource, isNotFound, ResourceClient } = await import('@cnikit/kube');
  const Nads = defineResource<NadObject>({
    group: 'k8s.cni.cncf.io',
    version: 'v1',
    kind: 'NetworkAttachmentDefinition',
    plural: 'network-attachment-definitions',
    namespaced: true,
  });
  const transport = connect({ kubeconfig });
  try {
    const list = await new ResourceClient(transport, Nads).listAll();
    return list.items.map((n) => ({ namespace: n.metadata.namespace ?? 'default', name: n.metadata.name, config: n.spec?.config }));
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  } finally {
    transport.close();
  }
}
