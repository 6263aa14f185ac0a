// One real control plane (etcd + kube-apiserver) for doctor's cluster-api test; no garbage collector (its pods
// have no owners to collect, and the test deletes what it makes).
import { clusterGlobalSetup } from '@cnikit/kube-testing';

export default clusterGlobalSetup('doctor', { garbageCollector: false });
