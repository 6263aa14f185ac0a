/**
 * The terway binary's network config (`10-terway.conf`): the anchor's keys
 * plus `socket` (where terwayd listens; default /var/run/eni/eni.socket).
 */
import { ConfigError, runtimeConfigOf, type CmdArgs } from '@cnikit/netlib';
import { DEFAULT_SOCKET } from '../rpc/proto';

export interface TerwayConf {
  socket: string;
  mtu: number;
  /** From the standard `bandwidth` capability, bits/s. */
  capabilityBandwidth?: { ingressRate?: number; egressRate?: number };
}

export function parseConf(a: CmdArgs): TerwayConf {
  const c = a.conf;
  const socket = c['socket'] ?? DEFAULT_SOCKET;
  if (typeof socket !== 'string' || !socket.startsWith('/')) throw new ConfigError('socket', 'an absolute path to terwayd\'s UNIX socket', socket);
  const mtu = c['mtu'] ?? 1500;
  if (typeof mtu !== 'number' || !Number.isInteger(mtu) || mtu < 576 || mtu > 9000) throw new ConfigError('mtu', 'an integer in [576, 9000]', mtu);
  const vt = c['eniip_virtual_type'];
  if (vt !== undefined && vt !== 'veth' && vt !== 'Veth') throw new ConfigError('eniip_virtual_type', '"veth" (ipvlan is not implemented yet)', vt);
  const bw = runtimeConfigOf(c).bandwidth as { ingressRate?: number; egressRate?: number } | undefined;
  return { socket, mtu, ...(bw ? { capabilityBandwidth: bw } : {}) };
}
