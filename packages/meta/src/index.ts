/** Shared pieces of the veth and router meta-plugins (seed 001). */
export * from './config';
export * from './host-ips';
export * from './migrate';
export * from './pod-ips';
export * from './log';
export * from './teardown';
