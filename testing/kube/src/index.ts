/**
 * @cnikit/kube-testing (test support, never bundled into an executable): a real control plane for tests (etcd + kube-apiserver + kube-controller-manager's
 * garbage collector, built and cached by tools/cluster/build.sh) and tools to break the network on purpose.
 */
export * from './cluster';
export * from './tcp-proxy';
export * from './kit';
// the repository's one polling helper for tests lives with the base test support
export { eventually } from '@cnikit/netlib-testing';
export * from './jest-global';
