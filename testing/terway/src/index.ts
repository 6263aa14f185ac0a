/**
 * @cnikit/terway-testing: test support for terway, never bundled into an executable: a local Alibaba
 * Cloud OpenAPI (ECS/VPC) that the official SDK talks to, a manual clock. The pool benchmark (bench.ts) is
 * loaded by path by tools/bench/terway.mjs: it pulls in terwayd and the Kubernetes client.
 */
export * from './fake-openapi';
export * from './fake-clock';
