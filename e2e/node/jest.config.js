// Node tier: real Kubernetes nodes (kubelet + containerd + runc, tools/node-lab) registered with a real API
// server; each file brings up its own two nodes and tears them down (one lab per machine: files run serially).
// Needs root; the first run builds kubelet, containerd and crictl (cached in ~/.cache/cnikit).
// Run: npx jest -c e2e/node/jest.config.js --runInBand
module.exports = {
  ...require('../../jest.preset.js'),
  displayName: 'node',
  rootDir: __dirname,
  testMatch: ['<rootDir>/**/*.test.ts'],
  testTimeout: 300_000,
  maxWorkers: 1,
};
