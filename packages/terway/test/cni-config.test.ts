/** The terway binary's 10-terway.conf: datapath choice (veth / ipvlan) and its keys. */
import type { CmdArgs } from '@cnikit/netlib';
import { parseConf } from '../src/cni/config';

const args = (conf: Record<string, unknown>): CmdArgs =>
  ({ conf: { cniVersion: '1.0.0', name: 'terway', type: 'terway', ...conf } }) as unknown as CmdArgs;

it('eniip_virtual_type selects veth (default) or ipvlan; host_ip is checked; anything else is refused by name', () => {
  expect(parseConf(args({})).virtualType).toBe('veth');
  expect(parseConf(args({ eniip_virtual_type: 'Veth' })).virtualType).toBe('veth');
  expect(parseConf(args({ eniip_virtual_type: 'IPVlan' }))).toMatchObject({ virtualType: 'ipvlan' });
  expect(parseConf(args({ eniip_virtual_type: 'ipvlan', host_ip: '10.6.0.1' }))).toMatchObject({
    virtualType: 'ipvlan',
    hostIp: '10.6.0.1',
  });
  expect(() => parseConf(args({ eniip_virtual_type: 'macvlan' }))).toThrow(/eniip_virtual_type/);
  expect(() => parseConf(args({ host_ip: 'node-1' }))).toThrow(/host_ip/);
});
