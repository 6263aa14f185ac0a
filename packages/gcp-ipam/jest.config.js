// Unit tests (pure logic, fake GCP) and tests against a real kube-apiserver + etcd started once by globalSetup
// (binaries built and cached by tools/cluster/build.sh). One API server for all files: run them in band.
const preset = require('../../jest.preset.js');

module.exports = {
  ...preset,
  rootDir: __dirname,
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  globalSetup: '<rootDir>/test/global-setup.ts',
  globalTeardown: '<rootDir>/test/global-teardown.ts',
  testTimeout: 120_000,
  maxWorkers: 1,
};
