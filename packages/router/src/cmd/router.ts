/**
 * router: a chained meta-plugin for a pod's secondary NIC (macvlan, SR-IOV)
 * whose first NIC comes from an overlay CNI. See docs/router.md.
 */
import { pluginMain } from '@cnikit/netlib';
import { routerHandlers } from '../plugin';

pluginMain(routerHandlers(), {
  about: 'cnikit router meta-plugin: east-west through the overlay NIC, north-south through the chained NIC',
});
