/**
 * @cnikit/terway-testing: test support for terway, never bundled into an executable: a local Alibaba
 * Cloud OpenAPI (ECS/VPC) that the official SDK talks to, a manual clock and the pool benchmark.
 */
export * from './fake-openapi';
export * from './fake-clock';
export { runBench } from './bench';
