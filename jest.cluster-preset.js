// jest settings for a package whose test files share one real control plane (etcd + kube-apiserver), started
// once per run by a globalSetup (testing/kube's clusterGlobalSetup) and stopped by the kube package's teardown.
// One API server for all files: they run one at a time on 2 cores.
const path = require('node:path');
const preset = require('./jest.preset.js');

/** `dir` is the package's folder; `globalSetup` its setup file (default packages/kube's cluster). */
module.exports = function clusterPreset(
  dir,
  { globalSetup = path.join(__dirname, 'packages/kube/test/global-setup.ts'), testTimeout = 60_000 } = {},
) {
  return {
    ...preset,
    rootDir: dir,
    testMatch: ['<rootDir>/test/**/*.test.ts'],
    globalSetup,
    globalTeardown: path.join(__dirname, 'packages/kube/test/global-teardown.ts'),
    testTimeout,
    maxWorkers: 1,
  };
};
