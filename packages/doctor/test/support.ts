// Node sources the doctor tests share: one ready pod with a macvlan + veth attachment and everything it implies.
import type { NodeSources } from '../src/node/join';
import type { Sandbox } from '../src/node/sources';

export const sandbox = (id: string, name: string, ready = true): Sandbox => ({ id, name, namespace: 'default', uid: `uid-${name}`, ready });

/** Pod `web` (container c1): its cached macvlan-veth attachment on net1, its lease and its host veth. */
export const healthyNode = (): NodeSources => ({
  sandboxes: [sandbox('c1', 'web')],
  cached: [
    {
      file: 'f',
      network: 'macvlan-veth',
      containerId: 'c1',
      ifName: 'net1',
      plugins: ['macvlan', 'veth'],
      ipam: ['host-local'],
      ips: ['10.9.0.5'],
      entry: {},
    },
  ],
  leases: [{ network: 'macvlan-veth', ip: '10.9.0.5', containerId: 'c1', ifName: 'net1' }],
  veths: [{ name: 'vethc1', network: 'macvlan-veth', containerId: 'c1' }],
  coil: [],
  router: [],
  terway: [],
});
