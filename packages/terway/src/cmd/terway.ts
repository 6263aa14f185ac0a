/**
 * terway: the thin CNI binary in front of terwayd (gRPC on /var/run/eni/eni.socket).
 * See docs/terway.md.
 */
import { lazyHandlers, pluginMain } from '@cnikit/netlib';

// The plugin module (the gRPC client, the datapaths) loads on the first command that needs it, so
// VERSION costs no more than the runtime's bare start (it took 2.1x with the module loaded up front).
pluginMain(
  lazyHandlers(() => require('../cni/plugin') as typeof import('../cni/plugin')),
  { about: 'cnikit terway: ENI multi-IP pods through terwayd' },
);
