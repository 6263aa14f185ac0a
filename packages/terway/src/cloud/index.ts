export * from './aliyun';
export * from './metadata';
