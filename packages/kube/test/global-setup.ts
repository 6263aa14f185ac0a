// One real control plane (etcd + kube-apiserver + the garbage collector) for all kube test files (and coil's,
// cilium-eni-ipam's). ConfigMaps bypass the watch cache, so a watch from a compacted resourceVersion gets a
// real 410 Gone from etcd (the informer re-list test); other resources keep the cache (bookmarks come from it).
import { clusterGlobalSetup } from '@cnikit/kube-testing';

export default clusterGlobalSetup('kube', { garbageCollector: true, apiServerArgs: ['--watch-cache-sizes=configmaps#0'] });
