// Unit tests, EC2 against moto_server, the operator against a real kube-apiserver (shared cluster from
// packages/kube's globalSetup) and the plugin's routing in network namespaces (root).
module.exports = require('../../jest.cluster-preset.js')(__dirname, { globalSetup: `${__dirname}/test/global-setup.ts` });
