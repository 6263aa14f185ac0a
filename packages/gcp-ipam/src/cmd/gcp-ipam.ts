/**
 * gcp-ipam: a CNI IPAM plugin handing out IPs of an IPPool as GCP alias /32s, with pod IP live migration.
 * See docs/gcp-ipam.md.
 */
import { lazyHandlers, pluginMain } from '@cnikit/netlib';

// The plugin module (HTTP/TLS clients of the API server and GCE) loads on the first command that needs
// it, so VERSION costs no more than the runtime's bare start (it took 1.4x with the module loaded up front).
pluginMain(
  lazyHandlers(() => require('../plugin') as typeof import('../plugin')),
  {
    about: 'cnikit gcp-ipam: IPPool IPAM with GCP alias IPs and live migration',
  },
);
