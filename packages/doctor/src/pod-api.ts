/**
 * What `doctor pod` reads from the API server: the pod and its events (the kube kit is loaded only here, so
 * the node commands need no API server).
 */
import type { PodEvent, PodFacts } from './pod';

interface CoreEvent {
  metadata: { name: string };
  type?: string;
  reason?: string;
  message?: string;
  count?: number;
  lastTimestamp?: string | null;
  eventTime?: string | null;
  series?: { count?: number; lastObservedTime?: string };
}

interface PodStatus {
  phase?: string;
  podIPs?: { ip: string }[];
  conditions?: { type: string; status: string; message?: string }[];
  containerStatuses?: { name: string; state?: { waiting?: { reason?: string; message?: string } } }[];
}

function factsOf(
  pod: { metadata: { namespace?: string; name?: string; uid?: string }; spec: { nodeName?: string } },
  st: PodStatus,
): PodFacts {
  const scheduled = st.conditions?.find((c) => c.type === 'PodScheduled');
  return {
    namespace: pod.metadata.namespace ?? 'default',
    name: pod.metadata.name ?? '',
    uid: pod.metadata.uid ?? '',
    nodeName: pod.spec.nodeName,
    phase: st.phase,
    ips: (st.podIPs ?? []).map((x) => x.ip),
    unschedulable: scheduled?.status === 'False' ? scheduled.message : undefined,
    waiting: (st.containerStatuses ?? []).flatMap((c) => (c.state?.waiting ? [`${c.name}: ${c.state.waiting.reason ?? 'waiting'}`] : [])),
  };
}

/** The pod (undefined when there is none) and its events, oldest first. */
export async function readPod(namespace: string, name: string, kubeconfig?: string): Promise<{ pod?: PodFacts; events: PodEvent[] }> {
  const { connect, defineResource, isNotFound, Pods, ResourceClient } = await import('@cnikit/kube');
  const Events = defineResource<CoreEvent>({ group: '', version: 'v1', kind: 'Event', plural: 'events', namespaced: true });
  const transport = connect({ kubeconfig });
  try {
    let pod: PodFacts | undefined;
    try {
      const p = await new ResourceClient(transport, Pods).get(name, { namespace });
      pod = factsOf(p, (p.status ?? {}) as PodStatus);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    const selector = `involvedObject.kind=Pod,involvedObject.name=${name}${pod?.uid ? `,involvedObject.uid=${pod.uid}` : ''}`;
    const list = await new ResourceClient(transport, Events).listAll({ namespace, fieldSelector: selector });
    const events = list.items
      .map((ev) => ({
        type: ev.type ?? '',
        reason: ev.reason ?? '',
        message: ev.message ?? '',
        count: ev.series?.count ?? ev.count ?? 1,
        last: ev.series?.lastObservedTime ?? ev.lastTimestamp ?? ev.eventTime ?? '',
      }))
      .sort((a, b) => (a.last < b.last ? -1 : a.last > b.last ? 1 : 0));
    return { pod, events };
  } finally {
    transport.close();
  }
}
