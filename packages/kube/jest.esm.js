// @kubernetes/client-node 2.x and some of its dependencies ship only ES modules. Jest runs tests as
// CommonJS, so a package whose tests load @cnikit/kube adds these to its transformIgnorePatterns
// exception list (see packages/kube/jest.config.js for the one-line way to do it).
module.exports = { esmPackages: ['@kubernetes/client-node', 'openid-client', 'jose', 'oauth4webapi', 'socks-proxy-agent', 'agent-base'] };
