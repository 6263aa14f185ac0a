/**
 * gcp-ipam: a CNI IPAM plugin handing out IPs of an IPPool as GCP alias /32s, with pod IP live migration.
 * See docs/gcp-ipam.md.
 */
import { pluginMain } from '@cnikit/netlib';
import { add, check, del, gc, status } from './plugin';

pluginMain({ add, del, check, gc, status }, { about: 'cnikit gcp-ipam: IPPool IPAM with GCP alias IPs and live migration' });
