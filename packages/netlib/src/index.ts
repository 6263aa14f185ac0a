/**
 * netlib: the only code that touches the kernel or speaks CNI.
 *
 * Kernel primitives are grouped by object and always take the network
 * namespace explicitly: `route.add(ns, {...})`, `link.get(ns, 'eth0')`.
 * There is no ambient "current namespace".
 */
export * from './errors';
export * from './netns';
export * as link from './link';
export * as addr from './addr';
export * as route from './route';
export * as rule from './rule';
export * as neigh from './neigh';
export * as tc from './tc';
export * as sysctl from './sysctl';
export * as tunnel from './tunnel';
export * as fou from './fou';
export * from './cni';
export * as ip from './ip';
export * from './lock';
export * from './log';
export * from './undo';
