export * from './config';
export * from './pool';
export * from './types';
export { pickVSwitch } from './vswitch';
export * from './dual-stack';
