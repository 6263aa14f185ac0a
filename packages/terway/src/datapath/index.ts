export * from './bandwidth';
export * from './eniip-veth';
