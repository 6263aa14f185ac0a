/** @cnikit/gcp-ipam: the IPAM plugin's pieces, the installer and the provisioner (see docs/gcp-ipam.md). */
export * from './types';
export * from './config';
export * from './gce';
export * from '@cnikit/kube/lite';
export * from './allocator';
export * from './coalescer';
export * from './migration';
export { add, del, check, gc, status, resultFor } from './plugin';
export * from './installer';
export * from './provisioner';
export * from './crds';
