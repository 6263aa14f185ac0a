export * from './bandwidth';
export * from './eniip-veth';
export * from './exclusive-eni';
