export * from './aliyun';
export * from './fake-openapi';
export * from './metadata';
