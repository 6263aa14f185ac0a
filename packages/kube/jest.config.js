// Tests run against a real kube-apiserver + etcd (+ kube-controller-manager for the garbage collector),
// started once per run by globalSetup (tools/cluster/build.sh builds and caches the binaries).
const preset = require('../../jest.preset.js');

module.exports = {
  ...preset,
  rootDir: __dirname,
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  globalSetup: '<rootDir>/test/global-setup.ts',
  globalTeardown: '<rootDir>/test/global-teardown.ts',
  testTimeout: 60_000,
  // One API server is shared by all test files; run them one at a time on 2 cores.
  maxWorkers: 1,
};
