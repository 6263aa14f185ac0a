// Training scenario of `veth` (tools/build/lib/train.mjs): the macvlan chain of `npm run bench` and a node run,
// veth on the pod's eth0.
import { trainMacvlanChain } from './macvlan-chain.mjs';

export function train(t) {
  trainMacvlanChain(t, { meta: 'veth', ifName: 'eth0', gateway: '172.30.0.1' });
}
