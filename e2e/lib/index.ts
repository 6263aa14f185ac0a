/** The end-to-end harness: namespaces, topologies, cnitool, podman, traffic, leak checks. */
export * from './exec';
export * from './paths';
export * from './netns';
export * from './inspect';
export * from './traffic';
export * from './topology';
export * from './cni';
export * from './conflists';
export * from './podman';
export * from './daemons';
export * from './direct-run';
