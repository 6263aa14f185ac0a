export * from './bandwidth';
export * from './eniip-veth';
export * from './exclusive-eni';
export * from './vpc-route';
export * from './eniip-ipvlan';
