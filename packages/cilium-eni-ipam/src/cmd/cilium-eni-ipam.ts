/** cilium-eni-ipam: the CNI IPAM plugin of the ENI mode (talks to the node agent). See docs/cilium-eni-ipam.md. */
import { pluginMain } from '@cnikit/netlib';

// The plugin module (the agent's HTTP client and its streams) loads on the first command that needs it,
// so VERSION loads nothing beyond the runtime's own start.
const plugin = (): typeof import('../plugin') => require('../plugin') as typeof import('../plugin');

pluginMain(
  {
    add: (a) => plugin().add(a),
    del: (a) => plugin().del(a),
    check: (a) => plugin().check(a),
    gc: (a) => plugin().gc(a),
    status: (a) => plugin().status(a),
  },
  { about: 'cnikit cilium-eni-ipam: AWS ENI IPs from the node agent (CiliumNode spec.ipam.pool)' },
);
