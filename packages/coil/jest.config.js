// Unit tests, controllers against a real kube-apiserver (started once per run by the kube kit's globalSetup),
// and coild + pod networking in real network namespaces (root).
module.exports = require('../../jest.cluster-preset.js')(__dirname);
