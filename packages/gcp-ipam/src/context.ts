/** The clients one CNI call uses, and the pod lookups shared by ADD, DEL and migration. */
import { AliasCoalescer } from './coalescer';
import { GceClient, metadataToken } from './gce';
import { kubeFromFile, kubeInCluster, isNotFound, type KubeLite } from '@cnikit/kube/lite';
import type { IpamConfig } from './config';

export interface PodLite {
  metadata: {
    name: string;
    namespace: string;
    uid: string;
    annotations?: Record<string, string>;
    ownerReferences?: { uid: string; controller?: boolean }[];
  };
}

export interface Ctx {
  cfg: IpamConfig;
  kube: KubeLite;
  gce: GceClient;
  coalescer: AliasCoalescer;
  close(): void;
}

/** Builds the clients of one call. `gceAttempts` bounds the cloud client's retries (STATUS must answer at once). */
export function makeCtx(cfg: IpamConfig, opts: { gceAttempts?: number } = {}): Ctx {
  const kube = cfg.kubeconfig ? kubeFromFile(cfg.kubeconfig) : kubeInCluster();
  const gce = new GceClient({
    project: cfg.project,
    endpoint: cfg.computeEndpoint,
    networkConnectivityEndpoint: cfg.networkConnectivityEndpoint,
    token: cfg.auth === 'metadata' ? metadataToken(cfg.metadataEndpoint) : undefined,
    operationTimeoutMs: cfg.operationTimeoutMs,
    rateLimitBackoffMs: cfg.rateLimitBackoffMs,
    maxAttempts: opts.gceAttempts,
  });
  const coalescer = new AliasCoalescer({
    stateDir: cfg.stateDir,
    gce,
    zone: cfg.zone,
    instance: cfg.instance,
    nic: cfg.networkInterface,
    batchWindowMs: cfg.batchWindowMs,
  });
  return {
    cfg,
    kube,
    gce,
    coalescer,
    close: () => {
      kube.close();
      gce.close();
    },
  };
}

export async function getPod(kube: KubeLite, namespace: string, name: string): Promise<PodLite | undefined> {
  if (!namespace || !name) return undefined; // runtimes outside Kubernetes (podman) send a name without a namespace
  try {
    return await kube.request<PodLite>('GET', `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(name)}`);
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

export const controllerUid = (pod: PodLite | undefined): string | undefined =>
  pod?.metadata.ownerReferences?.find((o) => o.controller)?.uid;
