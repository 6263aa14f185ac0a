/**
 * @cnikit/kube: the Kubernetes control-plane kit the CNI daemons and controllers stand on.
 *
 * - typed clients for built-in and custom resources from one definition (defineResource), with status and
 *   scale subresources, every patch type and update-with-retry on 409 Conflict;
 * - informers: list + watch with resourceVersion resume, bookmarks, re-list on 410 Gone, an indexed cache;
 * - a controller runtime: rate-limited work queue, reconcile functions, finalizer and ownerReference helpers;
 * - Lease leader election (coordination.k8s.io/v1) with release on shutdown, and LeaderRunner to run a
 *   controller only while leading;
 * - an HTTP server for Prometheus metrics (prom.ts) and /healthz /readyz;
 * - CRD manifests (apiextensions.k8s.io/v1, structural schemas, CEL validation rules).
 *
 * Credentials come from kubeconfig.ts (kubeconfig files, $KUBECONFIG, the pod's service account). A real test API server: @cnikit/kube/testing.
 */
export * from './errors';
export * from './log';
export * from './transport';
export * from './kubeconfig';
export * from './resource';
export * from './retry';
export * from './watch';
export * from './client';
export * from './cache';
export * from './informer';
export * from './workqueue';
export * from './controller';
export * from './objects';
export * from './leader';
export * from './metrics';
export * from './server';
export * from './crd';
