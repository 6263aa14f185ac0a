// Unit tests, and doctor cluster's reads and writes against a real kube-apiserver + etcd started once by
// globalSetup (binaries built and cached by tools/cluster/build.sh).
module.exports = require('../../jest.cluster-preset.js')(__dirname, { globalSetup: `${__dirname}/test/global-setup.ts` });
