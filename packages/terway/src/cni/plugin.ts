/**
 * The thin terway CNI binary: asks terwayd for the pod's network over gRPC
 * and wires the ENI multi-IP veth datapath. ADD rolls back with ReleaseIP;
 * DEL tears down what it finds and releases; both idempotent. STATUS fails
 * (code 50) while terwayd is not there to answer. GC collects the leases of
 * sandboxes the runtime no longer knows.
 */
import { existsSync } from 'node:fs';
import {
  CniCode,
  CniError,
  hostNetns,
  openNetns,
  openNetnsIfPresent,
  UndoStack,
  isNotFoundError,
  NetnsNotFoundError,
  validAttachments,
  type CmdArgs,
  type Result,
} from '@cnikit/netlib';
import { addr, link, route, type Netns } from '@cnikit/netlib';
import { checkPod, hostVethName, POD_GATEWAY, POD_GATEWAY6, setupPod, teardownPod } from '../datapath/eniip-veth';
import { isExclusiveEniLink, releaseExclusiveNetns, setupExclusivePod, teardownExclusivePod } from '../datapath/exclusive-eni';
import { checkIpvlanPod, setupIpvlanPod, teardownIpvlanPod } from '../datapath/eniip-ipvlan';
import { checkVpcRoutePod, setupVpcRoutePod, teardownVpcRoutePod } from '../datapath/vpc-route';
import { POOL_UNAVAILABLE, type GetInfoReply, type NetConf, type PodRef } from '../rpc/proto';
import type { BandwidthLimits } from '../datapath/bandwidth';
import { TerwayClient } from './client';
import { parseConf, type TerwayConf } from './config';

function podRef(a: CmdArgs): PodRef {
  const name = a.args['K8S_POD_NAME'];
  const ns = a.args['K8S_POD_NAMESPACE'];
  if (!name || !ns)
    throw new CniError(
      CniCode.InvalidEnvironment,
      'terway: CNI_ARGS must carry K8S_POD_NAME and K8S_POD_NAMESPACE',
      `CNI_ARGS keys: ${Object.keys(a.args).join(',')}`,
    );
  return {
    K8sPodName: name,
    K8sPodNamespace: ns,
    K8sPodInfraContainerId: a.args['K8S_POD_INFRA_CONTAINER_ID'] || a.containerId,
    Netns: a.netns,
    IfName: a.ifName,
  };
}

/** What every datapath's ADD starts from: the request, terwayd's answer, the pod's netns and its name. */
interface AddContext {
  a: CmdArgs;
  conf: TerwayConf;
  podNs: Netns;
  pod: { podNamespace: string; podName: string; ifName: string };
  nc: NetConf | undefined;
  podIp: string;
}

/** The ENI terwayd chose: its MAC and the vSwitch gateway. */
interface EniAddress {
  mac: string;
  gw: string;
}

/** VPC route: an address of the node's pod CIDR on a veth; no ENI. */
async function addVpcRoutePod(c: AddContext): Promise<Result> {
  const v = await setupVpcRoutePod(hostNetns(), c.podNs, { ...c.pod, ip: c.podIp, mtu: c.conf.mtu, bandwidth: bandwidthOf(c.nc, c.conf) });
  return vethPodResult(c.a, v, c.podIp);
}

/** Exclusive ENI: the ENI itself becomes the pod's interface. */
async function addExclusivePod(c: AddContext, { mac, gw }: EniAddress): Promise<Result> {
  const prefix = podCidrPrefix(c.nc);
  const x = await setupExclusivePod(hostNetns(), c.podNs, {
    ...c.pod,
    eni: { mac, ip: c.podIp, prefix, gateway: gw },
    serviceCidrs: serviceCidrs(c.nc),
    mtu: c.conf.mtu,
  });
  return {
    cniVersion: c.a.conf.cniVersion,
    interfaces: [{ name: x.hostVeth }, { name: c.a.ifName, mac, sandbox: c.a.netns }],
    ips: [{ address: `${c.podIp}/${prefix}`, gateway: gw, interface: 1 }],
    routes: [{ dst: '0.0.0.0/0', gw }],
  };
}

/** ENI multi-IP, ipvlan L2: the pod's eth0 is an ipvlan slave of the ENI. */
async function addIpvlanPod(c: AddContext, { mac, gw }: EniAddress): Promise<Result> {
  const nodeIp = c.conf.hostIp ?? (await route.get(hostNetns(), gw)).src;
  if (!nodeIp) throw new CniError(CniCode.Internal, `terway: ipvlan: no source address on the host towards ${gw}; set host_ip`);
  const prefix = podCidrPrefix(c.nc);
  const egress = bandwidthOf(c.nc, c.conf).egressBps;
  const v = await setupIpvlanPod(hostNetns(), c.podNs, {
    ...c.pod,
    ip: c.podIp,
    eni: { mac, gateway: gw, prefix },
    nodeIp,
    serviceCidrs: serviceCidrs(c.nc),
    mtu: c.conf.mtu,
    bandwidth: egress ? { egressBps: egress } : {},
  });
  return {
    cniVersion: c.a.conf.cniVersion,
    interfaces: [{ name: c.a.ifName, mac: v.podMac, sandbox: c.a.netns }],
    ips: [{ address: `${c.podIp}/${prefix}`, gateway: gw, interface: 0 }],
    routes: [{ dst: '0.0.0.0/0', gw }],
  };
}

/** ENI multi-IP on a veth with policy routing; in dual stack an IPv6 of the same ENI and the vSwitch's IPv6 gateway come along. */
async function addVethPod(c: AddContext, { mac, gw }: EniAddress): Promise<Result> {
  const podIp6 = c.nc?.BasicInfo?.PodIP?.IPv6 || undefined;
  const gw6 = c.nc?.ENIInfo?.GatewayIP?.IPv6 || c.nc?.BasicInfo?.GatewayIP?.IPv6 || undefined;
  const s = await setupPod(hostNetns(), c.podNs, {
    ...c.pod,
    ip: c.podIp,
    ...(podIp6 ? { ip6: podIp6 } : {}),
    eni: { mac, gateway: gw, ...(gw6 ? { gateway6: gw6 } : {}) },
    mtu: c.conf.mtu,
    bandwidth: bandwidthOf(c.nc, c.conf),
  });
  return vethPodResult(c.a, s, c.podIp, podIp6);
}

/** The datapath terwayd's answer and the config ask for. */
function wirePod(c: AddContext, reply: { Success: boolean; IPType: string }, ref: PodRef): Promise<Result> {
  const who = `${ref.K8sPodNamespace}/${ref.K8sPodName}`;
  if (reply.IPType === 'TypeVPCIP') {
    if (!reply.Success || !c.podIp) throw new CniError(CniCode.Internal, `terway: AllocIP answered without an IPv4 for ${who}`);
    return addVpcRoutePod(c);
  }
  const mac = c.nc?.ENIInfo?.MAC;
  const gw = c.nc?.ENIInfo?.GatewayIP?.IPv4 || c.nc?.BasicInfo?.GatewayIP?.IPv4;
  if (!reply.Success || !c.podIp || !mac || !gw)
    throw new CniError(CniCode.Internal, `terway: AllocIP answered without an IPv4, ENI MAC or gateway for ${who}`);
  if (reply.IPType === 'TypeVPCENI') return addExclusivePod(c, { mac, gw });
  if (c.conf.virtualType === 'ipvlan') return addIpvlanPod(c, { mac, gw });
  return addVethPod(c, { mac, gw });
}

export async function add(a: CmdArgs): Promise<Result> {
  const conf = parseConf(a);
  const ref = podRef(a);
  const client = new TerwayClient(conf.socket);
  const undo = new UndoStack();
  const podNs = openNetns(a.netns);
  try {
    const reply = await client.allocIP(ref);
    undo.push('ReleaseIP', async () => void (await client.releaseIP({ ...ref, Reason: 'roll back failed ADD' })));
    const nc = reply.NetConfs[0];
    const pod = { podNamespace: ref.K8sPodNamespace, podName: ref.K8sPodName, ifName: a.ifName };
    const result = await wirePod({ a, conf, podNs, pod, nc, podIp: nc?.BasicInfo?.PodIP?.IPv4 ?? '' }, reply, ref);
    undo.commit();
    return result;
  } catch (e) {
    await undo.unwind();
    throw e;
  } finally {
    podNs.close();
  }
}

export async function del(a: CmdArgs): Promise<void> {
  const conf = parseConf(a);
  const ref = podRef(a);
  const client = new TerwayClient(conf.socket);
  try {
    let daemonError: unknown;
    let info: GetInfoReply | undefined;
    try {
      info = await client.getIPInfo(ref);
    } catch (e) {
      daemonError = e;
    }
    if (info && heldByAnotherSandbox(info, ref)) {
      // kubelet re-created the sandbox: the pod's name, IP, host veth and rules now belong to the
      // live one. This DEL only clears its own netns, and the lease stays with its holder.
      await clearOwnNetns(a, info);
      return;
    }
    if (daemonError) {
      // Without terwayd nobody can say whose the pod's host objects are (this DEL may be a stale
      // one): only this sandbox's interface goes (a veth takes its host end along); the retry,
      // once terwayd answers, removes the rest and releases.
      await clearOwnNetns(a, undefined);
      throw daemonError;
    }
    await teardownLease(a, conf, ref, info);
    await client.releaseIP({ ...ref, Reason: 'cni del' });
  } catch (e) {
    if (e instanceof NetnsNotFoundError || isNotFoundError(e)) return;
    throw e;
  }
}

/**
 * GC (CNI 1.1): each lease whose sandbox is not among `cni.dev/valid-attachments` goes as its DEL would take it:
 * its host objects, then ReleaseIP naming that sandbox (terwayd ignores a release by any other). Terway itself has
 * no GC call and leaves leaks to terwayd's loop, which sees only leases whose host veth is gone: an ADD killed
 * before the runtime recorded it, or a pod gone with its netns kept, holds its address until a GC names it.
 * Leases without a recorded sandbox (stored by an older terwayd) are left to that loop.
 */
export async function gc(a: CmdArgs): Promise<void> {
  const conf = parseConf(a);
  const keep = new Set(validAttachments(a.conf).map((x) => x.containerID));
  const client = new TerwayClient(conf.socket);
  const failed: string[] = [];
  for (const l of (await client.listLeases()).Leases) {
    if (!l.ContainerId || keep.has(l.ContainerId)) continue;
    const ref: PodRef = {
      K8sPodNamespace: l.K8sPodNamespace,
      K8sPodName: l.K8sPodName,
      K8sPodInfraContainerId: l.ContainerId,
      Netns: l.Netns,
      IfName: a.ifName || 'eth0',
    };
    try {
      // asked again: the pod's new sandbox may have taken the lease since the list
      const info = await client.getIPInfo(ref);
      if (!info.Success || heldByAnotherSandbox(info, ref)) continue;
      await teardownLease({ ...a, netns: ref.Netns, ifName: ref.IfName }, conf, ref, info);
      await client.releaseIP({ ...ref, Reason: 'cni gc' });
    } catch (e) {
      failed.push(`${l.K8sPodNamespace}/${l.K8sPodName} (${l.IPv4}): ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  if (failed.length) throw new CniError(CniCode.Internal, `terway: GC: ${failed.length} lease(s) not collected`, failed.join('; '));
}

/** True when terwayd says another sandbox (container ID) of this pod holds its IP. */
function heldByAnotherSandbox(info: GetInfoReply, ref: PodRef): boolean {
  return (
    info.Success && Boolean(info.ContainerId) && Boolean(ref.K8sPodInfraContainerId) && info.ContainerId !== ref.K8sPodInfraContainerId
  );
}

/** The host objects of the pod's lease (found by pod name and IP) and the pod's interface. */
async function teardownLease(a: CmdArgs, conf: TerwayConf, ref: PodRef, info: GetInfoReply | undefined): Promise<void> {
  const ip = info?.Success ? info.NetConfs[0]?.BasicInfo?.PodIP?.IPv4 : undefined;
  const pod = { podNamespace: ref.K8sPodNamespace, podName: ref.K8sPodName };
  const exclusiveMac = info?.IPType === 'TypeVPCENI' ? info.NetConfs[0]?.ENIInfo?.MAC : undefined;
  if (info?.IPType === 'TypeVPCIP') return teardownVpcRoutePod(hostNetns(), { ...pod, ...(ip ? { ip } : {}) });
  if (!exclusiveMac && conf.virtualType !== 'ipvlan') {
    const ip6 = info?.Success ? info.NetConfs[0]?.BasicInfo?.PodIP?.IPv6 || undefined : undefined;
    return teardownPod(hostNetns(), { ...pod, ...(ip ? { ip } : {}), ...(ip6 ? { ip6 } : {}) });
  }
  const podNs = openNetnsIfPresent(a.netns);
  try {
    if (exclusiveMac) await teardownExclusivePod(hostNetns(), podNs, { ...pod, mac: exclusiveMac });
    else await teardownIpvlanPod(hostNetns(), podNs, { ifName: a.ifName, ...(ip ? { ip } : {}) });
  } finally {
    podNs?.close();
  }
}

/**
 * A DEL that may not own the pod's host objects (stale, or terwayd unreachable): nothing on the
 * host is touched by name or IP (the host veth, the /32 route and the rules may be a live
 * sandbox's). Its netns loses the pod interface if one is left; an exclusive ENI (known from
 * terwayd, or by its alias) goes back to the host, where the live sandbox's ADD needs it.
 */
async function clearOwnNetns(a: CmdArgs, info: GetInfoReply | undefined): Promise<void> {
  const podNs = openNetnsIfPresent(a.netns);
  if (!podNs) return;
  try {
    const mac = info?.IPType === 'TypeVPCENI' ? info.NetConfs[0]?.ENIInfo?.MAC : undefined;
    if (mac) return await releaseExclusiveNetns(hostNetns(), podNs, mac);
    const l = await link.find(podNs, a.ifName);
    if (l && isExclusiveEniLink(l)) return await releaseExclusiveNetns(hostNetns(), podNs, l.mac);
    if (l && (l.kind === 'veth' || l.kind === 'ipvlan')) await link.del(podNs, l.index);
  } finally {
    podNs.close();
  }
}

/** STATUS waits this long for terwayd's answer: containerd asks every few seconds. */
export const STATUS_TIMEOUT_MS = 5_000;

/** The pod STATUS asks terwayd about: no pod has this name, so the lookup changes and counts nothing but the RPC. */
const STATUS_PROBE: PodRef = { K8sPodNamespace: 'cni.dev', K8sPodName: 'status-probe', K8sPodInfraContainerId: '', Netns: '', IfName: '' };

/**
 * STATUS: every ADD needs terwayd (the IP comes from its pool), so the node is not ready for pods
 * while terwayd's socket is missing or nobody answers a GetIPInfo on it within STATUS_TIMEOUT_MS,
 * or while terwayd answers that no address can be had (nothing idle, the cloud failing): code 50.
 * Pods already wired keep their datapath in the kernel, hence 50 and not 51.
 */
export async function status(a: CmdArgs): Promise<void> {
  const conf = parseConf(a);
  if (!existsSync(conf.socket))
    throw new CniError(
      CniCode.NotAvailable,
      `terway: terwayd is not running: no socket at ${conf.socket}`,
      'start terwayd (or fix "socket" in the network config)',
    );
  const client = new TerwayClient(conf.socket, STATUS_TIMEOUT_MS);
  let info: GetInfoReply;
  try {
    info = await client.getIPInfo(STATUS_PROBE);
  } catch (e) {
    throw new CniError(
      CniCode.NotAvailable,
      `terway: terwayd does not answer on ${conf.socket}`,
      e instanceof Error ? e.message : String(e),
      { cause: e },
    );
  }
  if (info.Error.startsWith(POOL_UNAVAILABLE))
    throw new CniError(CniCode.NotAvailable, `terway: ${info.Error}`, 'terwayd asks the cloud again when its back-off ends');
}

/** Plugin-specific CNI code (>= 100): the pod's network is not what ADD made. */
export const CODE_CHECK_FAILED = 100;

export async function check(a: CmdArgs): Promise<void> {
  const conf = parseConf(a);
  const ref = podRef(a);
  const client = new TerwayClient(conf.socket);
  const podNs = openNetns(a.netns);
  try {
    const info = await client.getIPInfo(ref);
    if (heldByAnotherSandbox(info, ref))
      throw new CniError(
        CODE_CHECK_FAILED,
        `terway: CHECK: the IP of ${ref.K8sPodNamespace}/${ref.K8sPodName} is held by sandbox ${info.ContainerId}, not ${ref.K8sPodInfraContainerId}`,
      );
    const nc = info.NetConfs[0];
    const ip = nc?.BasicInfo?.PodIP?.IPv4;
    const mac = nc?.ENIInfo?.MAC;
    if (info.Success && ip && info.IPType === 'TypeVPCIP') {
      const problems = await checkVpcRoutePod(hostNetns(), podNs, {
        podNamespace: ref.K8sPodNamespace,
        podName: ref.K8sPodName,
        ifName: a.ifName,
        ip,
      });
      if (problems.length)
        throw new CniError(
          CODE_CHECK_FAILED,
          `terway: CHECK: ${problems[0]}${problems.length > 1 ? ` (and ${problems.length - 1} more)` : ''}`,
          problems.join('; '),
        );
      return;
    }
    if (!info.Success || !ip || !mac)
      throw new CniError(CODE_CHECK_FAILED, `terway: CHECK: terwayd holds no IP for ${ref.K8sPodNamespace}/${ref.K8sPodName}`, info.Error);
    const problems =
      info.IPType === 'TypeVPCENI'
        ? await checkExclusive(podNs, a.ifName, ip, mac, hostVethName(ref.K8sPodNamespace, ref.K8sPodName))
        : conf.virtualType === 'ipvlan'
          ? await checkIpvlanPod(hostNetns(), podNs, { ifName: a.ifName, ip, eniMac: mac })
          : await checkPod(hostNetns(), podNs, {
              podNamespace: ref.K8sPodNamespace,
              podName: ref.K8sPodName,
              ifName: a.ifName,
              ip,
              eniMac: mac,
            });
    if (problems.length)
      throw new CniError(
        CODE_CHECK_FAILED,
        `terway: CHECK: ${problems[0]}${problems.length > 1 ? ` (and ${problems.length - 1} more)` : ''}`,
        problems.join('; '),
      );
  } finally {
    podNs.close();
  }
}

async function checkExclusive(podNs: Netns, ifName: string, ip: string, mac: string, hostVeth: string): Promise<string[]> {
  const problems: string[] = [];
  const l = await link.find(podNs, ifName);
  if (!l || l.mac.toLowerCase() !== mac.toLowerCase()) problems.push(`pod interface ${ifName} is not the ENI ${mac}`);
  else if (!(await addr.list(podNs, { index: l.index, family: 4 })).some((x) => x.address.startsWith(`${ip}/`)))
    problems.push(`pod address ${ip} on ${ifName} is missing`);
  if (!(await link.find(hostNetns(), hostVeth))) problems.push(`host veth ${hostVeth} is missing`);
  return problems;
}

/** Rate limits of a pod: the pod annotations (from terwayd) first, else the CNI `bandwidth` capability. */
function bandwidthOf(nc: NetConf | undefined, conf: TerwayConf): BandwidthLimits {
  const ingress = nc?.Pod?.Ingress || conf.capabilityBandwidth?.ingressRate || undefined;
  const egress = nc?.Pod?.Egress || conf.capabilityBandwidth?.egressRate || undefined;
  return { ...(ingress ? { ingressBps: ingress } : {}), ...(egress ? { egressBps: egress } : {}) };
}

/** Prefix length of the ENI's vSwitch (PodCIDR), 32 when absent. */
function podCidrPrefix(nc: NetConf | undefined): number {
  return Number((nc?.BasicInfo?.PodCIDR?.IPv4 ?? '').split('/')[1] ?? 32) || 32;
}

function serviceCidrs(nc: NetConf | undefined): string[] {
  return (nc?.BasicInfo?.ServiceCIDR?.IPv4 ?? '')
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
}

/** Result of a veth-wired pod (VPC route, ENI multi-IP veth): /32 with the link-local gateway. */
function vethPodResult(a: CmdArgs, v: { hostVeth: string; hostVethMac: string; podMac: string }, podIp: string, podIp6?: string): Result {
  return {
    cniVersion: a.conf.cniVersion,
    interfaces: [
      { name: v.hostVeth, mac: v.hostVethMac },
      { name: a.ifName, mac: v.podMac, sandbox: a.netns },
    ],
    ips: [
      { address: `${podIp}/32`, gateway: POD_GATEWAY, interface: 1 },
      ...(podIp6 ? [{ address: `${podIp6}/128`, gateway: POD_GATEWAY6, interface: 1 }] : []),
    ],
    routes: [{ dst: '0.0.0.0/0', gw: POD_GATEWAY }, ...(podIp6 ? [{ dst: '::/0', gw: POD_GATEWAY6 }] : [])],
  };
}
