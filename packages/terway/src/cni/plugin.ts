/**
 * The thin terway CNI binary: asks terwayd for the pod's network over gRPC
 * and wires the ENI multi-IP veth datapath. ADD rolls back with ReleaseIP;
 * DEL tears down what it finds and releases; both idempotent.
 */
import {
  CniCode,
  CniError,
  hostNetns,
  openNetns,
  openNetnsIfPresent,
  UndoStack,
  isNotFoundError,
  NetnsNotFoundError,
  type CmdArgs,
  type Result,
} from '@cnikit/netlib';
import { addr, link, route, type Netns } from '@cnikit/netlib';
import { checkPod, hostVethName, POD_GATEWAY, POD_GATEWAY6, setupPod, teardownPod } from '../datapath/eniip-veth';
import { setupExclusivePod, teardownExclusivePod } from '../datapath/exclusive-eni';
import { checkIpvlanPod, setupIpvlanPod, teardownIpvlanPod } from '../datapath/eniip-ipvlan';
import { checkVpcRoutePod, setupVpcRoutePod, teardownVpcRoutePod } from '../datapath/vpc-route';
import { STALE_SANDBOX, type NetConf, type PodRef } from '../rpc/proto';
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
    const podIp = nc?.BasicInfo?.PodIP?.IPv4;
    const mac = nc?.ENIInfo?.MAC;
    const gw = nc?.ENIInfo?.GatewayIP?.IPv4 || nc?.BasicInfo?.GatewayIP?.IPv4;
    if (reply.IPType === 'TypeVPCIP') {
      // VPC route: an address of the node's pod CIDR on a veth; no ENI.
      if (!reply.Success || !podIp)
        throw new CniError(CniCode.Internal, `terway: AllocIP answered without an IPv4 for ${ref.K8sPodNamespace}/${ref.K8sPodName}`);
      const v = await setupVpcRoutePod(hostNetns(), podNs, {
        podNamespace: ref.K8sPodNamespace,
        podName: ref.K8sPodName,
        ifName: a.ifName,
        ip: podIp,
        mtu: conf.mtu,
        bandwidth: bandwidthOf(nc, conf),
      });
      undo.commit();
      return vethPodResult(a, v, podIp);
    }
    if (!reply.Success || !podIp || !mac || !gw)
      throw new CniError(
        CniCode.Internal,
        `terway: AllocIP answered without an IPv4, ENI MAC or gateway for ${ref.K8sPodNamespace}/${ref.K8sPodName}`,
      );
    if (reply.IPType === 'TypeVPCENI') {
      // Exclusive ENI: the ENI itself becomes the pod's interface.
      const prefix = podCidrPrefix(nc);
      const services = serviceCidrs(nc);
      const x = await setupExclusivePod(hostNetns(), podNs, {
        podNamespace: ref.K8sPodNamespace,
        podName: ref.K8sPodName,
        ifName: a.ifName,
        eni: { mac, ip: podIp, prefix, gateway: gw },
        serviceCidrs: services,
        mtu: conf.mtu,
      });
      undo.commit();
      return {
        cniVersion: a.conf.cniVersion,
        interfaces: [{ name: x.hostVeth }, { name: a.ifName, mac, sandbox: a.netns }],
        ips: [{ address: `${podIp}/${prefix}`, gateway: gw, interface: 1 }],
        routes: [{ dst: '0.0.0.0/0', gw }],
      };
    }
    if (conf.virtualType === 'ipvlan') {
      // ENI multi-IP, ipvlan L2: the pod's eth0 is an ipvlan slave of the ENI.
      const nodeIp = conf.hostIp ?? (await route.get(hostNetns(), gw)).src;
      if (!nodeIp) throw new CniError(CniCode.Internal, `terway: ipvlan: no source address on the host towards ${gw}; set host_ip`);
      const prefix = podCidrPrefix(nc);
      const services = serviceCidrs(nc);
      const egress = bandwidthOf(nc, conf).egressBps;
      const v = await setupIpvlanPod(hostNetns(), podNs, {
        podNamespace: ref.K8sPodNamespace,
        podName: ref.K8sPodName,
        ifName: a.ifName,
        ip: podIp,
        eni: { mac, gateway: gw, prefix },
        nodeIp,
        serviceCidrs: services,
        mtu: conf.mtu,
        bandwidth: egress ? { egressBps: egress } : {},
      });
      undo.commit();
      return {
        cniVersion: a.conf.cniVersion,
        interfaces: [{ name: a.ifName, mac: v.podMac, sandbox: a.netns }],
        ips: [{ address: `${podIp}/${prefix}`, gateway: gw, interface: 0 }],
        routes: [{ dst: '0.0.0.0/0', gw }],
      };
    }
    // Dual stack: an IPv6 of the same ENI and the vSwitch's IPv6 gateway come along.
    const podIp6 = nc?.BasicInfo?.PodIP?.IPv6 || undefined;
    const gw6 = nc?.ENIInfo?.GatewayIP?.IPv6 || nc?.BasicInfo?.GatewayIP?.IPv6 || undefined;
    const s = await setupPod(hostNetns(), podNs, {
      podNamespace: ref.K8sPodNamespace,
      podName: ref.K8sPodName,
      ifName: a.ifName,
      ip: podIp,
      ...(podIp6 ? { ip6: podIp6 } : {}),
      eni: { mac, gateway: gw, ...(gw6 ? { gateway6: gw6 } : {}) },
      mtu: conf.mtu,
      bandwidth: bandwidthOf(nc, conf),
    });
    undo.commit();
    return vethPodResult(a, s, podIp, podIp6);
  } catch (e) {
    await undo.unwind();
    throw e;
  } finally {
    podNs.close();
    client.close();
  }
}

export async function del(a: CmdArgs): Promise<void> {
  const conf = parseConf(a);
  const ref = podRef(a);
  const client = new TerwayClient(conf.socket);
  try {
    let ip: string | undefined;
    let daemonError: unknown;
    let info: Awaited<ReturnType<TerwayClient['getIPInfo']>> | undefined;
    try {
      info = await client.getIPInfo(ref);
      ip = info.Success ? info.NetConfs[0]?.BasicInfo?.PodIP?.IPv4 : undefined;
    } catch (e) {
      daemonError = e;
    }
    // The host side (veth named after the pod, rules and routes of its IP) and the lease are the live
    // sandbox's now: only this sandbox's own interface goes.
    if (info && !info.Success && info.Error.startsWith(STALE_SANDBOX)) return await teardownStaleSandbox(a);
    // The pod's veth goes even when terwayd cannot answer (its rules are then
    // left to terwayd's repair); the release is what the retry is for.
    const exclusiveMac = info?.IPType === 'TypeVPCENI' ? info.NetConfs[0]?.ENIInfo?.MAC : undefined;
    if (exclusiveMac) {
      const podNs = openNetnsIfPresent(a.netns);
      try {
        await teardownExclusivePod(hostNetns(), podNs, { podNamespace: ref.K8sPodNamespace, podName: ref.K8sPodName, mac: exclusiveMac });
      } finally {
        podNs?.close();
      }
    } else if (info?.IPType === 'TypeVPCIP')
      await teardownVpcRoutePod(hostNetns(), { podNamespace: ref.K8sPodNamespace, podName: ref.K8sPodName, ...(ip ? { ip } : {}) });
    else if (conf.virtualType === 'ipvlan') {
      const podNs = openNetnsIfPresent(a.netns);
      try {
        await teardownIpvlanPod(hostNetns(), podNs, { ifName: a.ifName, ...(ip ? { ip } : {}) });
      } finally {
        podNs?.close();
      }
    } else {
      const ip6 = info?.Success ? info.NetConfs[0]?.BasicInfo?.PodIP?.IPv6 || undefined : undefined;
      await teardownPod(hostNetns(), {
        podNamespace: ref.K8sPodNamespace,
        podName: ref.K8sPodName,
        ...(ip ? { ip } : {}),
        ...(ip6 ? { ip6 } : {}),
      });
    }
    if (daemonError) throw daemonError;
    await client.releaseIP({ ...ref, Reason: 'cni del' });
  } catch (e) {
    if (e instanceof NetnsNotFoundError || isNotFoundError(e)) return;
    throw e;
  } finally {
    client.close();
  }
}

/**
 * DEL of a sandbox that no longer owns the pod's network: its interface (a veth or ipvlan end, which takes
 * nothing of the live sandbox with it) is removed inside its own netns, if that still exists. An exclusive
 * ENI cannot be in two sandboxes: it is left where it is.
 */
async function teardownStaleSandbox(a: CmdArgs): Promise<void> {
  const podNs = openNetnsIfPresent(a.netns);
  if (!podNs) return;
  try {
    const l = await link.get(podNs, a.ifName).catch((e: unknown) => (isNotFoundError(e) ? undefined : Promise.reject(e)));
    if (l && (l.kind === 'veth' || l.kind === 'ipvlan'))
      await link.del(podNs, l.index).catch((e: unknown) => (isNotFoundError(e) ? undefined : Promise.reject(e)));
  } finally {
    podNs.close();
  }
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
    client.close();
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
/** How long STATUS waits for terwayd: containerd asks about every 5 s and must not pile calls up. */
export const STATUS_TIMEOUT_MS = 2_000;

/**
 * STATUS (CNI 1.1.0): ADD can be served only through terwayd, so an unreachable terwayd is code 50, which
 * containerd turns into NetworkReady=false (new pods wait) instead of failing every pod's ADD.
 */
export async function status(a: CmdArgs): Promise<void> {
  const conf = parseConf(a);
  const client = new TerwayClient(conf.socket);
  try {
    await client.waitForReady(STATUS_TIMEOUT_MS);
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    throw new CniError(CniCode.NotAvailable, 'terwayd is not reachable', `terwayd not reachable on ${conf.socket}: ${reason}`, {
      cause: err,
    });
  } finally {
    client.close();
  }
}

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
