/** cilium-eni-ipam: the CNI IPAM plugin of the ENI mode (talks to the node agent). See docs/cilium-eni-ipam.md. */
import { lazyHandlers, pluginMain } from '@cnikit/netlib';

// The plugin module (the agent's HTTP client and its streams) loads on the first command that needs it,
// so VERSION loads nothing beyond the runtime's own start.
pluginMain(
  lazyHandlers(() => require('../plugin') as typeof import('../plugin')),
  {
    about: 'cnikit cilium-eni-ipam: AWS ENI IPs from the node agent (CiliumNode spec.ipam.pool)',
  },
);
