// Kernel lab tier: each test file boots a Debian kernel under qemu (TCG) once and runs its
// scenarios inside (see README.md). Needs root (apt-get on first run, 9p export of /).
// Run: npx jest -c e2e/kernel-lab/jest.config.js
module.exports = {
  ...require('../../jest.preset.js'),
  displayName: 'kernel-lab',
  rootDir: __dirname,
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  // A boot is ~10 s of emulation on an idle core; a busy machine can make it several times slower.
  testTimeout: 600_000,
  // One VM at a time (lab.ts also serializes boots machine-wide with a file lock).
  maxWorkers: 1,
};
