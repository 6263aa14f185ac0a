/**
 * terwayd's PodSource from the Kubernetes API: a pod's annotations (bandwidth,
 * `k8s.aliyun.com/pod-ip-reservation`) and whether a StatefulSet owns it
 * (sticky IP). A missing pod is undefined; other API errors propagate.
 */
import { clientFor, Pods, type KubeTransport } from '@cnikit/kube';
import type { PodSource } from './daemon';

export function kubePodSource(transport: KubeTransport): PodSource {
  const pods = clientFor(transport, Pods);
  return {
    async get(namespace, name) {
      const p = await pods.find(name, { namespace });
      if (!p) return undefined;
      return {
        annotations: { ...(p.metadata.annotations ?? {}) },
        statefulSet: (p.metadata.ownerReferences ?? []).some((r) => r.kind === 'StatefulSet' && r.apiVersion.startsWith('apps/')),
      };
    },
  };
}
