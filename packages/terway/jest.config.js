// Root needed for the *.netns tests (network namespaces). @kubernetes/client-node (via @cnikit/kube)
// is ESM-only: transformed to CommonJS like in packages/kube.
const preset = require('../../jest.preset.js');
const { esmPackages } = require('../kube/jest.esm.js');

module.exports = {
  ...preset,
  rootDir: __dirname,
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  transformIgnorePatterns: preset.transformIgnorePatterns.map((p) => p.replace('(?!(', `(?!(${esmPackages.join('|')}|`)),
};
