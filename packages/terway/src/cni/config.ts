/**
 * The terway binary's network config (`10-terway.conf`): Terway's keys
 * plus `socket` (where terwayd listens; default /var/run/eni/eni.socket).
 */
import { ConfigError, runtimeConfigOf, type CmdArgs } from '@cnikit/netlib';
import { DEFAULT_SOCKET } from '../rpc/proto';

export interface TerwayConf {
  socket: string;
  mtu: number;
  /** ENI multi-IP datapath: veth policy routing (default) or ipvlan L2. */
  virtualType: 'veth' | 'ipvlan';
  /** ipvlan: the node address put on ipvl_<idx> (default: the source address of the host's route to the vSwitch gateway). */
  hostIp?: string;
  /** From the standard `bandwidth` capability, bits/s. */
  capabilityBandwidth?: { ingressRate?: number; egressRate?: number };
}

export function parseConf(a: CmdArgs): TerwayConf {
  const c = a.conf;
  const socket = c['socket'] ?? DEFAULT_SOCKET;
  if (typeof socket !== 'string' || !socket.startsWith('/'))
    throw new ConfigError('socket', "an absolute path to terwayd's UNIX socket", socket);
  const mtu = c['mtu'] ?? 1500;
  if (typeof mtu !== 'number' || !Number.isInteger(mtu) || mtu < 576 || mtu > 9000)
    throw new ConfigError('mtu', 'an integer in [576, 9000]', mtu);
  const vt = c['eniip_virtual_type'];
  if (vt !== undefined && !(typeof vt === 'string' && ['veth', 'ipvlan'].includes(vt.toLowerCase())))
    throw new ConfigError('eniip_virtual_type', '"veth" or "ipvlan"', vt);
  const hostIp = c['host_ip'];
  if (hostIp !== undefined && (typeof hostIp !== 'string' || !/^\d{1,3}(\.\d{1,3}){3}$/.test(hostIp)))
    throw new ConfigError('host_ip', 'an IPv4 address', hostIp);
  const virtualType = typeof vt === 'string' && vt.toLowerCase() === 'ipvlan' ? 'ipvlan' : 'veth';
  const bw = runtimeConfigOf(c).bandwidth as { ingressRate?: number; egressRate?: number } | undefined;
  return { socket, mtu, virtualType, ...(hostIp ? { hostIp } : {}), ...(bw ? { capabilityBandwidth: bw } : {}) };
}
