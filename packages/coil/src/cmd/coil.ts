/** coil: the CNI binary; forwards every verb to coild (see plugin.ts). */
import { pluginMain } from '@cnikit/netlib';
import { VERSIONS, add, check, del, gc, status } from '../cni/plugin';

pluginMain({ add, del, check, gc, status }, { versions: VERSIONS, about: 'coil: CNI plugin of Coil v2 (forwards to coild)' });
