/**
 * The cilium-eni-ipam CNI IPAM plugin: asks the node agent for an IP over its UNIX socket, sets up the ENI
 * routing in the host netns, and returns the IP with the ENI's data: the interface entry carries the ENI MAC
 * (name `eni<number>`, the ENI's interface number), the gateway is the subnet's router, routes cover the VPC CIDRs.
 */
import {
  CniCode,
  CniError,
  TransientError,
  hostNetns,
  ip as ipm,
  optionalPrevResultOf,
  validAttachments,
  type CmdArgs,
  type Result,
} from '@cnikit/netlib';
import { agentRequest, type AgentReply, type AgentRequest } from './agent-client';
import { parseConfig, type PluginConfig } from './config';
import { checkEniRouting, setupEniRouting, teardownEniRouting } from './routing';

const ownerOf = (a: CmdArgs): string => `${a.containerId}/${a.ifName}`;

async function ask(cfg: PluginConfig, req: AgentRequest): Promise<Extract<AgentReply, { ok: true }>> {
  let reply: AgentReply;
  try {
    reply = await agentRequest(cfg.socket, req, cfg.timeoutMs);
  } catch (e) {
    throw new TransientError(`cilium-eni-ipam: agent unreachable at ${cfg.socket}`, (e as Error).message, { cause: e });
  }
  if (!reply.ok) throw new CniError(reply.code, 'cilium-eni-ipam: agent refused', reply.msg);
  return reply;
}

export async function add(args: CmdArgs): Promise<Result> {
  const cfg = parseConfig(args.conf);
  const { lease } = await ask(cfg, { op: 'add', owner: ownerOf(args) });
  if (!lease) throw new CniError(CniCode.Internal, 'cilium-eni-ipam: agent answered without a lease');
  const { eni } = lease;
  if (cfg.routing) {
    try {
      await setupEniRouting(hostNetns(), lease.ip, eni, cfg);
    } catch (e) {
      await teardownEniRouting(hostNetns(), lease.ip, cfg).catch(() => undefined);
      await ask(cfg, { op: 'del', owner: ownerOf(args) }).catch(() => undefined);
      throw e;
    }
  }
  const prefix = eni.subnetCidr ? ipm.parseCidr(eni.subnetCidr).prefix : 32;
  return {
    cniVersion: '1.1.0',
    interfaces: [{ name: `eni${eni.number}`, mac: eni.mac }],
    ips: [{ address: `${lease.ip}/${prefix}`, gateway: eni.gateway, interface: 0 }],
    routes: eni.vpcCidrs.map((dst) => ({ dst, gw: eni.gateway })),
  };
}

export async function del(args: CmdArgs): Promise<void> {
  const cfg = parseConfig(args.conf);
  const prev = optionalPrevResultOf(args.conf);
  const ips = new Set((prev?.ips ?? []).map((i) => ipm.parseCidr(i.address).address));
  try {
    const { released } = await ask(cfg, { op: 'del', owner: ownerOf(args) });
    for (const a of released ?? []) ips.add(a);
  } catch (e) {
    // The agent gone is not the pod's problem on DEL: rules are still removed; the agent restores from status.
    if (!(e instanceof TransientError)) throw e;
  }
  if (cfg.routing) for (const a of ips) await teardownEniRouting(hostNetns(), a, cfg);
}

/** Ready when the agent answers and has a free IP. */
export async function status(args: CmdArgs): Promise<void> {
  const cfg = parseConfig(args.conf);
  const r = await ask(cfg, { op: 'status', owner: '' }).catch((e) => {
    throw new CniError(CniCode.NotAvailable, 'cilium-eni-ipam: agent not available', (e as Error).message);
  });
  if (!r.free) {
    const why = r.operatorError ? `; the operator's last error: ${r.operatorError}` : '';
    throw new CniError(CniCode.NotAvailable, `cilium-eni-ipam: no free IP on this node yet${why}`, `pool ${r.pool}, used ${r.used}`);
  }
}

/**
 * CHECK: the agent still holds an IP for this container (and, when the runtime passes a prevResult, the one
 * it reports), and the ENI routing for it is in place in the host netns.
 */
export async function check(args: CmdArgs): Promise<void> {
  const cfg = parseConfig(args.conf);
  const prev = optionalPrevResultOf(args.conf);
  const { lease } = await ask(cfg, { op: 'check', owner: ownerOf(args) });
  if (!lease) throw new CniError(CniCode.Internal, 'cilium-eni-ipam: CHECK failed', `the agent holds no IP for ${ownerOf(args)}`);
  const prevIps = (prev?.ips ?? []).map((i) => ipm.parseCidr(i.address).address);
  if (prevIps.length && !prevIps.includes(lease.ip)) {
    throw new CniError(
      CniCode.Internal,
      'cilium-eni-ipam: CHECK failed',
      `the agent holds ${lease.ip} for ${ownerOf(args)}, prevResult has ${prevIps.join(', ')}`,
    );
  }
  if (cfg.routing) {
    try {
      await checkEniRouting(hostNetns(), lease.ip, lease.eni, cfg);
    } catch (e) {
      if (e instanceof CniError) throw e;
      throw new CniError(
        CniCode.Internal,
        'cilium-eni-ipam: CHECK failed',
        `routing of ${lease.ip} (ENI ${lease.eni.id}): ${(e as Error).message}`,
        { cause: e },
      );
    }
  }
}

/**
 * GC: the agent frees every allocation whose owner is not one of `cni.dev/valid-attachments` and answers the
 * IPs; their rules are removed here. A GC config without the list is code 7 (it would free everything).
 */
export async function gc(args: CmdArgs): Promise<void> {
  const cfg = parseConfig(args.conf);
  const keep = validAttachments(args.conf).map((a) => `${a.containerID}/${a.ifname}`);
  const { released } = await ask(cfg, { op: 'gc', owner: '', keep });
  if (cfg.routing) for (const a of released ?? []) await teardownEniRouting(hostNetns(), a, cfg);
}
