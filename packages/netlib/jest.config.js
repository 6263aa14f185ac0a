// The kernel suites run twice: once on the evented netlink transport (daemons) and once on the blocking one
// (a one-shot CNI call; nl/channel.ts), so both are held to the same behaviour.
const base = { ...require('../../jest.preset.js'), rootDir: __dirname };
module.exports = {
  projects: [
    { ...base, displayName: 'netlib', testMatch: ['<rootDir>/test/**/*.test.ts'] },
    {
      ...base,
      displayName: 'netlib, blocking netlink',
      testMatch: ['<rootDir>/test/kernel/**/*.test.ts'],
      setupFiles: ['<rootDir>/test/kernel/blocking.setup.ts'],
    },
  ],
};
