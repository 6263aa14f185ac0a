export { clusterGlobalTeardown as default } from '@cnikit/kube-testing';
