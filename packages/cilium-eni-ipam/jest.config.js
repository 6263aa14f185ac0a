// Unit tests, EC2 against moto_server, the operator against a real kube-apiserver (shared cluster from
// packages/kube's globalSetup) and the plugin's routing in network namespaces (root).
const preset = require('../../jest.preset.js');

module.exports = {
  ...preset,
  rootDir: __dirname,
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  globalSetup: '<rootDir>/test/global-setup.ts',
  globalTeardown: '<rootDir>/../kube/test/global-teardown.ts',
  testTimeout: 60_000,
  maxWorkers: 1,
};
