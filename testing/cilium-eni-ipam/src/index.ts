export * from './moto';
export * from './ec2-fixture';
export * from './fault-proxy';
export * from './alloc-sim';
export * from './stub-agent';
export * from './imds';
