// Unit tests, EC2 against moto_server, the operator against a real kube-apiserver (shared cluster from
// packages/kube's globalSetup) and the plugin's routing in network namespaces (root).
const preset = require('../../jest.preset.js');
const { esmPackages } = require('../kube/jest.esm.js');

module.exports = {
  ...preset,
  rootDir: __dirname,
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  transformIgnorePatterns: preset.transformIgnorePatterns.map((p) => p.replace('(?!(', `(?!(${esmPackages.join('|')}|`)),
  globalSetup: '<rootDir>/test/global-setup.ts',
  globalTeardown: '<rootDir>/../kube/test/global-teardown.ts',
  testTimeout: 60_000,
  maxWorkers: 1,
};
