/**
 * VPC route mode's pod CIDR from the Node object: `spec.podCIDRs` (dual-stack
 * clusters list one per family; the first IPv4 one is ours), else
 * `spec.podCIDR`. A node may not have one yet when terwayd starts (the node
 * IPAM controller assigns it after the kubelet registers the node): watch the
 * node until it does, up to a timeout.
 */
import { Informer, Nodes, clientFor, type KubeTransport, type Node } from '@cnikit/kube';
import { ip } from '@cnikit/netlib';

/** The node's IPv4 pod CIDR, if it has one. */
export function podCidrOf(node: Node | undefined): string | undefined {
  const all = [...(node?.spec?.podCIDRs ?? []), ...(node?.spec?.podCIDR ? [node.spec.podCIDR] : [])];
  return all.find((c) => ip.isValidCidr(c) && !c.includes(':'));
}

export async function nodePodCidr(transport: KubeTransport, nodeName: string, opts: { timeoutMs?: number } = {}): Promise<string> {
  const timeoutMs = opts.timeoutMs ?? 5 * 60_000;
  const nodes = clientFor(transport, Nodes);
  const now = podCidrOf(await nodes.find(nodeName));
  if (now) return now;
  const informer = new Informer(nodes, { fieldSelector: `metadata.name=${nodeName}`, name: `node ${nodeName}` });
  try {
    return await new Promise<string>((resolve, reject) => {
      const t = setTimeout(
        () =>
          reject(
            new Error(
              `terwayd: node ${nodeName} has no spec.podCIDR after ${timeoutMs} ms (is the node IPAM controller, --allocate-node-cidrs, running?)`,
            ),
          ),
        timeoutMs,
      );
      const seen = (n: Node): void => {
        const c = podCidrOf(n);
        if (!c) return;
        clearTimeout(t);
        resolve(c);
      };
      informer.addHandlers({ add: seen, update: (_o, n) => seen(n) });
      informer.start({ timeoutMs }).catch((e: unknown) => {
        clearTimeout(t);
        reject(e instanceof Error ? e : new Error(String(e)));
      });
    });
  } finally {
    await informer.stop();
  }
}
