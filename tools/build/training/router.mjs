// Training scenario of `router` (tools/build/lib/train.mjs): the macvlan chain `npm run bench` runs, router on
// a secondary interface (net1) of a pod whose eth0 comes from an overlay (a bridge cni0 in the "host" namespace).
import { trainMacvlanChain } from './macvlan-chain.mjs';

export function train(t) {
  trainMacvlanChain(t, {
    meta: 'router',
    ifName: 'net1',
    gateway: '172.30.0.254',
    setup(host, pod) {
      t.ip('-n', host, 'link', 'add', 'cni0', 'type', 'bridge');
      t.ip('-n', host, 'addr', 'add', '10.244.0.1/16', 'dev', 'cni0');
      t.ip('-n', host, 'link', 'set', 'cni0', 'up');
      // The pod's eth0 from the overlay, as the cluster network leaves it before Multus' secondary one.
      t.ip('-n', host, 'link', 'add', 'ov0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod);
      t.ip('-n', host, 'link', 'set', 'ov0', 'master', 'cni0', 'up');
      t.ip('-n', pod, 'addr', 'add', '10.244.1.10/16', 'dev', 'eth0');
      t.ip('-n', pod, 'link', 'set', 'eth0', 'up');
      t.ip('-n', pod, 'route', 'add', 'default', 'via', '10.244.0.1', 'dev', 'eth0');
    },
  });
}
