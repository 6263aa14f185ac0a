// Shared jest settings: TypeScript through swc (fast on 2 cores), workspace
// packages resolved to their sources, ESM-only dependencies (execa and its
// helpers, @kubernetes/client-node and its) transformed to CommonJS so jest's
// module system can load them: one list for every jest config here.
const path = require('node:path');
const esmOnly = [
  'execa',
  'figures',
  'get-stream',
  'human-signals',
  'is-plain-obj',
  'npm-run-path',
  'path-key',
  'pretty-ms',
  'parse-ms',
  'strip-final-newline',
  'unicorn-magic',
  'yoctocolors',
  '@sindresorhus',
  'is-stream',
  'is-unicode-supported',
  // @kubernetes/client-node 2.x and the dependencies of it that ship only ES modules
  '@kubernetes/client-node',
  'openid-client',
  'jose',
  'oauth4webapi',
  'socks-proxy-agent',
  'agent-base',
];
module.exports = {
  testEnvironment: 'node',
  transform: {
    '^.+\\.(t|j|mj)s$': ['@swc/jest', { jsc: { target: 'es2022', parser: { syntax: 'typescript' } }, module: { type: 'commonjs' } }],
  },
  transformIgnorePatterns: [`/node_modules/(?!(${esmOnly.join('|')})/)`],
  moduleFileExtensions: ['ts', 'js', 'mjs', 'json', 'node'],
  moduleNameMapper: {
    '^@cnikit/netlib$': path.join(__dirname, 'packages/netlib/src/index.ts'),
    '^@cnikit/netlib/retry$': path.join(__dirname, 'packages/netlib/src/retry/index.ts'),
    '^@cnikit/netlib/unix$': path.join(__dirname, 'packages/netlib/src/unix/index.ts'),
    '^@cnikit/meta$': path.join(__dirname, 'packages/meta/src/index.ts'),
    '^@cnikit/router/marks$': path.join(__dirname, 'packages/router/src/marks.ts'),
    '^@cnikit/gcp-ipam/types$': path.join(__dirname, 'packages/gcp-ipam/src/types.ts'),
    '^@cnikit/gcp-ipam/cloud$': path.join(__dirname, 'packages/gcp-ipam/src/cloud.ts'),
    '^@cnikit/unary-grpc$': path.join(__dirname, 'packages/unary-grpc/src/index.ts'),
    '^@cnikit/unary-grpc/server$': path.join(__dirname, 'packages/unary-grpc/src/server.ts'),
    '^@cnikit/kube$': path.join(__dirname, 'packages/kube/src/index.ts'),
    '^@cnikit/kube/lite$': path.join(__dirname, 'packages/kube/src/lite.ts'),
    '^@cnikit/kube/prom$': path.join(__dirname, 'packages/kube/src/prom.ts'),
    '^@cnikit/terway$': path.join(__dirname, 'packages/terway/src/index.ts'),
    '^@cnikit/terway/cni-plugin$': path.join(__dirname, 'packages/terway/src/cni/plugin.ts'),
    '^@cnikit/terway/cloud$': path.join(__dirname, 'packages/terway/src/cloud/node-enis.ts'),
    '^@cnikit/cilium-eni-ipam$': path.join(__dirname, 'packages/cilium-eni-ipam/src/index.ts'),
    '^@cnikit/cilium-eni-ipam/agent-client$': path.join(__dirname, 'packages/cilium-eni-ipam/src/agent-client.ts'),
    '^@cnikit/cilium-eni-ipam/cloud$': path.join(__dirname, 'packages/cilium-eni-ipam/src/cloud.ts'),
    // test support lives in its own workspace packages (testing/<name>), outside anything that ships
    '^@cnikit/([a-z-]+)-testing$': path.join(__dirname, 'testing/$1/src/index.ts'),
    // the cloud emulators: programs of their own (npm run gce-emulator), and the tests' in-process doubles
    '^@cnikit/gce-emulator$': path.join(__dirname, 'testing/gce-emulator/src/index.ts'),
    '^@cnikit/aliyun-emulator$': path.join(__dirname, 'testing/aliyun-emulator/src/index.ts'),
  },
};
