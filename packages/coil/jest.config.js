// Unit tests, controllers against a real kube-apiserver (started once per run by the kube kit's globalSetup),
// and coild + pod networking in real network namespaces (root).
const preset = require('../../jest.preset.js');

module.exports = {
  ...preset,
  rootDir: __dirname,
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  globalSetup: '<rootDir>/../kube/test/global-setup.ts',
  globalTeardown: '<rootDir>/../kube/test/global-teardown.ts',
  testTimeout: 60_000,
  maxWorkers: 1,
};
