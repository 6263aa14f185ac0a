// One real control plane (etcd + kube-apiserver) for every gcp-ipam test file. No garbage collector: the tests'
// pods name ReplicaSet owners that do not exist, and the collector would delete those pods.
import { clusterGlobalSetup } from '@cnikit/kube-testing';

export default clusterGlobalSetup('gcp-ipam', { garbageCollector: false });
