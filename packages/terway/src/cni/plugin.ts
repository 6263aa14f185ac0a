/**
 * The thin terway CNI binary: asks terwayd for the pod's network over gRPC
 * and wires the ENI multi-IP veth datapath. ADD rolls back with ReleaseIP;
 * DEL tears down what it finds and releases; both idempotent.
 */
import { CniCode, CniError, hostNetns, openNetns, UndoStack, isNotFoundError, NetnsNotFoundError, type CmdArgs, type Result } from '@cnikit/netlib';
import { POD_GATEWAY, setupPod, teardownPod } from '../datapath/eniip-veth';
import type { PodRef } from '../rpc/proto';
import { TerwayClient } from './client';
import { parseConf } from './config';

function podRef(a: CmdArgs): PodRef {
  const name = a.args['K8S_POD_NAME'];
  const ns = a.args['K8S_POD_NAMESPACE'];
  if (!name || !ns) throw new CniError(CniCode.InvalidEnvironment, 'terway: CNI_ARGS must carry K8S_POD_NAME and K8S_POD_NAMESPACE', `CNI_ARGS keys: ${Object.keys(a.args).join(',')}`);
  return { K8sPodName: name, K8sPodNamespace: ns, K8sPodInfraContainerId: a.args['K8S_POD_INFRA_CONTAINER_ID'] || a.containerId, Netns: a.netns, IfName: a.ifName };
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
    if (!reply.Success || !podIp || !mac || !gw) throw new CniError(CniCode.Internal, `terway: AllocIP answered without an IPv4, ENI MAC or gateway for ${ref.K8sPodNamespace}/${ref.K8sPodName}`);
    const ingress = nc.Pod?.Ingress || conf.capabilityBandwidth?.ingressRate || undefined;
    const egress = nc.Pod?.Egress || conf.capabilityBandwidth?.egressRate || undefined;
    const s = await setupPod(hostNetns(), podNs, {
      podNamespace: ref.K8sPodNamespace,
      podName: ref.K8sPodName,
      ifName: a.ifName,
      ip: podIp,
      eni: { mac, gateway: gw },
      mtu: conf.mtu,
      bandwidth: { ...(ingress ? { ingressBps: ingress } : {}), ...(egress ? { egressBps: egress } : {}) },
    });
    undo.commit();
    return {
      cniVersion: a.conf.cniVersion,
      interfaces: [
        { name: s.hostVeth, mac: s.hostVethMac },
        { name: a.ifName, mac: s.podMac, sandbox: a.netns },
      ],
      ips: [{ address: `${podIp}/32`, gateway: POD_GATEWAY, interface: 1 }],
      routes: [{ dst: '0.0.0.0/0', gw: POD_GATEWAY }],
    };
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
    try {
      const info = await client.getIPInfo(ref);
      ip = info.Success ? info.NetConfs[0]?.BasicInfo?.PodIP?.IPv4 : undefined;
    } catch (e) {
      daemonError = e;
    }
    // The pod's veth goes even when terwayd cannot answer (its rules are then
    // left to terwayd's repair); the release is what the retry is for.
    await teardownPod(hostNetns(), { podNamespace: ref.K8sPodNamespace, podName: ref.K8sPodName, ...(ip ? { ip } : {}) });
    if (daemonError) throw daemonError;
    await client.releaseIP({ ...ref, Reason: 'cni del' });
  } catch (e) {
    if (e instanceof NetnsNotFoundError || isNotFoundError(e)) return;
    throw e;
  } finally {
    client.close();
  }
}
