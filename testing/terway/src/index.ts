/**
 * @cnikit/terway-testing: test support for terway, never bundled into an executable: a manual clock, terway's
 * cloud client pointed at the emulator. The
 * Alibaba Cloud OpenAPI emulator is a package of its own (@cnikit/aliyun-emulator). The pool benchmark
 * (bench.ts) is loaded by path by tools/bench/terway.mjs: it pulls in terwayd and the Kubernetes client.
 */
export * from './fake-clock';
export * from './cloud';
