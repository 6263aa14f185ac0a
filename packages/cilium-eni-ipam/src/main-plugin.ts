/** cilium-eni-ipam: the CNI IPAM plugin of the ENI mode (talks to the node agent). See docs/cilium-eni-ipam.md. */
import { pluginMain } from '@cnikit/netlib';
import { add, check, del, gc, status } from './plugin';

pluginMain({ add, del, check, gc, status }, { about: 'cnikit cilium-eni-ipam: AWS ENI IPs from the node agent (CiliumNode spec.ipam.pool)' });
