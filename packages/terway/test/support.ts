/**
 * Set-up the terway tests share: the fake OpenAPI serving one node, the cloud client pointed at it, and one
 * CNI call made as a runtime makes it (the handler in-process, the test's host netns as its host).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { runPlugin, type Netns, type PluginHandlers } from '@cnikit/netlib';
import { useHostNetns, type TestNs } from '@cnikit/netlib-testing';
import { FakeOpenApi, type FakeInstanceType, type FakeOpenApiOptions } from '@cnikit/aliyun-emulator';
import * as plugin from '../src/cni/plugin';

export interface NodeSpec {
  /** vSwitch ID -> IPv4 CIDR, all in zone cn-hangzhou-i; the node's primary NIC sits in the first. */
  vswitches: Record<string, string>;
  instanceType: string;
  quota: FakeInstanceType;
}

/** The fake OpenAPI listening, with the one instance the tests run as: i-node1. */
export async function startNodeApi(opts: FakeOpenApiOptions, node: NodeSpec): Promise<FakeOpenApi> {
  const api = new FakeOpenApi(opts);
  for (const [id, cidr] of Object.entries(node.vswitches)) api.addVSwitch(id, 'cn-hangzhou-i', cidr);
  api.addInstanceType(node.instanceType, node.quota);
  api.addInstance('i-node1', node.instanceType, Object.keys(node.vswitches)[0]!);
  await api.listen();
  return api;
}

export { cloudFor, type CloudOptions } from '@cnikit/terway-testing';

export interface CniCall {
  hostNs: Netns;
  /** terwayd's gRPC socket. */
  socket: string;
  command: 'ADD' | 'DEL' | 'CHECK';
  pod: TestNs;
  /** The pod's name (namespace default); the sandbox's container ID is `ctr-<name>` unless given. */
  name: string;
  containerId?: string;
  version?: string;
  /** Extra network config fields. */
  extra?: Record<string, unknown>;
}

/** One terway CNI call; `out` is the parsed stdout (undefined when empty). */
export async function terwayCni(c: CniCall): Promise<{ code: number; out: Record<string, unknown> | undefined }> {
  const containerId = c.containerId ?? `ctr-${c.name}`;
  const conf = { cniVersion: c.version ?? '1.0.0', name: 'terway', type: 'terway', socket: c.socket, ...c.extra };
  const env = {
    CNI_COMMAND: c.command,
    CNI_CONTAINERID: containerId,
    CNI_NETNS: c.pod.ns.path,
    CNI_IFNAME: 'eth0',
    CNI_PATH: '/opt/cni/bin',
    CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${c.name};K8S_POD_INFRA_CONTAINER_ID=${containerId}`,
  };
  const r = await useHostNetns(c.hostNs, () =>
    runPlugin(plugin as unknown as PluginHandlers, { about: 'terway test' }, { env, stdin: JSON.stringify(conf) }),
  );
  return { code: r.exitCode, out: r.stdout.trim() ? (JSON.parse(r.stdout) as Record<string, unknown>) : undefined };
}

/** startTerwayd's options for i-node1 served by `api`: its socket and state file in `dir`, periodic GC off (tests run it). */
export function nodeDaemon(api: FakeOpenApi, dir: string, hostNs: Netns) {
  return {
    socket: path.join(dir, 'eni.socket'),
    stateFile: path.join(dir, 'pod.json'),
    metadataUrl: `http://${api.endpoint}`,
    ecsEndpoint: api.endpoint,
    vpcEndpoint: api.endpoint,
    protocol: 'http' as const,
    hostNs,
    gcIntervalMs: 0,
  };
}

/** After a daemon test: the daemon stopped (if one runs), the fake OpenAPI closed, the namespaces and the scratch dir removed. */
export async function cleanUp(
  d: { stop(): Promise<void> } | undefined,
  api: FakeOpenApi,
  ns: { cleanup(): void },
  dir: string,
): Promise<void> {
  await d?.stop();
  await api.close();
  ns.cleanup();
  fs.rmSync(dir, { recursive: true, force: true });
}
