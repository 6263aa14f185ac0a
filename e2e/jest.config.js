// End-to-end tier: real binaries (dist/bin + Debian's /usr/lib/cni) driven by cnitool and podman in
// network namespaces. Needs root. Run serially: `jest -c e2e/jest.config.js --runInBand`.
module.exports = {
  ...require('../jest.preset.js'),
  displayName: 'e2e',
  rootDir: __dirname,
  testMatch: ['<rootDir>/**/*.test.ts'],
  // the kernel lab (qemu; e2e/kernel-lab/jest.config.js) and the real nodes (e2e/node/jest.config.js) are tiers of
  // their own, run by tools/test-all.sh
  testPathIgnorePatterns: ['/node_modules/', '<rootDir>/kernel-lab/', '<rootDir>/node/'],
  testTimeout: 180_000,
  maxWorkers: 1,
  globalSetup: '<rootDir>/global-setup.ts',
  globalTeardown: '<rootDir>/global-teardown.ts',
};
