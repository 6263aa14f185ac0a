// Tests run against a real kube-apiserver + etcd (+ kube-controller-manager for the garbage collector),
// started once per run by globalSetup (tools/cluster/build.sh builds and caches the binaries).
module.exports = require('../../jest.cluster-preset.js')(__dirname);
