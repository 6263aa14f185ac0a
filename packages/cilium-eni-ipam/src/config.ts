/** The IPAM section the plugin reads: `"ipam": {"type": "cilium-eni-ipam", ...}`. */
import { ConfigError, type NetConf } from '@cnikit/netlib';
import { DEFAULT_SOCKET } from './agent-client';

export interface PluginConfig {
  socket: string;
  /** Per-ENI routing table = offset + ENI number (Cilium: 10). */
  tableOffset: number;
  /** Priority of the `from <pod IP> lookup <ENI table>` rule (Cilium: 110 + 1). */
  rulePriority: number;
  /** Priority of the `to <pod IP> lookup main` rule. */
  ingressPriority: number;
  /** Set up the per-ENI rule and routes in the host netns. Default true. */
  routing: boolean;
  timeoutMs: number;
}

export function parseConfig(conf: NetConf): PluginConfig {
  const ipam = (conf.ipam ?? {}) as Record<string, unknown>;
  const int = (k: string, d: number, min: number, max: number): number => {
    const v = ipam[k];
    if (v === undefined) return d;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max)
      throw new ConfigError(`ipam.${k}`, `an integer in [${min}, ${max}]`, v);
    return v;
  };
  const socket = ipam.socket ?? DEFAULT_SOCKET;
  if (typeof socket !== 'string' || !socket.startsWith('/')) throw new ConfigError('ipam.socket', 'an absolute path', socket);
  const routing = ipam.routing ?? true;
  if (typeof routing !== 'boolean') throw new ConfigError('ipam.routing', 'a boolean', routing);
  return {
    socket,
    tableOffset: int('table-offset', 10, 1, 60000),
    rulePriority: int('rule-priority', 111, 1, 32765),
    ingressPriority: int('ingress-rule-priority', 20, 1, 32765),
    routing,
    timeoutMs: int('timeout-ms', 10_000, 100, 600_000),
  };
}
