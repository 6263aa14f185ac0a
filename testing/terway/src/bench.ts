/**
 * The benchmark behind tools/bench/terway.mjs: the whole stack in one
 * process, in network namespaces (root): the terway CNI handler (in-process,
 * a test "host" netns as its host) -> gRPC on a UNIX socket -> terwayd's
 * daemon -> the pool -> terway's OpenAPI client -> FakeOpenApi with a fixed latency
 * per call. N pod ADDs, `concurrency` at a time, from a warm pool (IPs
 * already there) and from a cold one (every IP comes from the cloud).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { runPlugin, type PluginHandlers } from '@cnikit/netlib';
import { newNs, sh, useHostNetns } from '@cnikit/netlib-testing';
import { AliyunEniCloud, EniIpPool, LeaseStore, TerwayDaemon, TerwayServer, parsePoolConfig, realClock } from '@cnikit/terway';
import * as plugin from '@cnikit/terway/cni-plugin';
import { FakeOpenApi } from '@cnikit/aliyun-emulator';

export interface BenchOptions {
  pods: number;
  concurrency: number;
  latencyMs: number;
  warm: boolean;
  eniQuantity?: number;
  ipsPerEni?: number;
}

export interface BenchResult {
  pods: number;
  wallMs: number;
  podsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  apiCalls: Record<string, number>;
  warmUpMs: number;
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? 0;
}

export async function runBench(o: BenchOptions): Promise<BenchResult> {
  const host = newNs('twbh');
  const ext = newNs('twbx');
  const pods = Array.from({ length: o.pods }, () => newNs('twbp'));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'terway-bench-'));
  let n = 0;
  const api = new FakeOpenApi({
    attachDelayMs: o.latencyMs,
    onAttached: (eni) => {
      n++;
      sh(host.ns, `ip link add eni${n} address ${eni.mac} type veth peer name vpc${n} netns ${ext.name}`);
    },
  });
  api.addVSwitch('vsw-a', 'cn-hangzhou-i', '192.168.0.0/22');
  api.addInstanceType('ecs.bench', { eniQuantity: o.eniQuantity ?? 8, eniPrivateIpAddressQuantity: o.ipsPerEni ?? 20 });
  api.addInstance('i-bench', 'ecs.bench', 'vsw-a');
  await api.listen();
  const cloud = new AliyunEniCloud({
    regionId: 'cn-hangzhou',
    instanceId: 'i-bench',
    accessKeyId: 'LTAI-test',
    accessKeySecret: 'test-secret',
    ecsEndpoint: api.endpoint,
    vpcEndpoint: api.endpoint,
    protocol: 'http',
    pollIntervalMs: 20,
  });
  const quota = await cloud.instanceQuota('ecs.bench');
  const pool = new EniIpPool({
    config: parsePoolConfig({
      max_pool_size: o.pods,
      ip_warm_up_size: o.warm ? o.pods : 0,
      security_group: 'sg-1',
      vswitches: { 'cn-hangzhou-i': ['vsw-a'] },
    }),
    quota,
    cloud,
    clock: realClock,
    zone: 'cn-hangzhou-i',
    allocTimeoutMs: 120_000,
  });
  const socket = path.join(dir, 'eni.socket');
  const server = new TerwayServer(new TerwayDaemon({ pool, store: new LeaseStore(path.join(dir, 'pod.json')) }), socket);
  await server.start();
  try {
    let warmUpMs = 0;
    if (o.warm) {
      const t0 = Date.now();
      pool.reconcile();
      while (pool.stats().idle < o.pods) await new Promise((r) => setTimeout(r, 10));
      warmUpMs = Date.now() - t0;
    }
    // The latency applies to every call from here on.
    api.setLatency(o.latencyMs);
    const before = new Map<string, number>();
    for (const c of api.calls) before.set(c.action, (before.get(c.action) ?? 0) + 1);
    const conf = JSON.stringify({ cniVersion: '1.0.0', name: 'terway', type: 'terway', socket });
    const lat: number[] = [];
    let next = 0;
    const t0 = Date.now();
    await useHostNetns(host.ns, async () => {
      const worker = async (): Promise<void> => {
        for (;;) {
          const i = next++;
          if (i >= o.pods) return;
          const env = {
            CNI_COMMAND: 'ADD',
            CNI_CONTAINERID: `bench-${i}`,
            CNI_NETNS: pods[i]!.ns.path,
            CNI_IFNAME: 'eth0',
            CNI_PATH: '/opt/cni/bin',
            CNI_ARGS: `K8S_POD_NAMESPACE=bench;K8S_POD_NAME=p${i}`,
          };
          const s = Date.now();
          const r = await runPlugin(plugin as unknown as PluginHandlers, { about: 'bench' }, { env, stdin: conf });
          if (r.exitCode !== 0) throw new Error(`ADD p${i}: ${r.stdout}`);
          lat.push(Date.now() - s);
        }
      };
      await Promise.all(Array.from({ length: o.concurrency }, worker));
    });
    const wallMs = Date.now() - t0;
    const apiCalls: Record<string, number> = {};
    const seen = new Map(before);
    for (const c of api.calls) {
      const k = seen.get(c.action) ?? 0;
      if (k > 0) seen.set(c.action, k - 1);
      else apiCalls[c.action] = (apiCalls[c.action] ?? 0) + 1;
    }
    return { pods: o.pods, wallMs, podsPerSec: (o.pods * 1000) / wallMs, p50Ms: pct(lat, 50), p99Ms: pct(lat, 99), apiCalls, warmUpMs };
  } finally {
    pool.stop();
    await server.stop();
    await api.close();
    for (const p of pods) p.cleanup();
    ext.cleanup();
    host.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
