/**
 * terway: the thin CNI binary in front of terwayd (gRPC on /var/run/eni/eni.socket).
 * See docs/terway.md.
 */
import { pluginMain } from '@cnikit/netlib';
import { add, check, del } from './plugin';

pluginMain({ add, del, check }, { about: 'cnikit terway: ENI multi-IP pods through terwayd' });
