/**
 * An ADD killed half-way (SIGKILL, as when the runtime's timeout fires or the node
 * reboots the runtime) followed by the DEL the runtime then sends leaves nothing
 * behind on the node. The kill lands at many points of ADD: a spread of delays after
 * the process starts, from before it reads stdin to after it has finished.
 */
import * as os from 'node:os';
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import { DIST_BIN, execPlugin, MacvlanNode, macvlanNode, Netns, snapshot, diffSnapshots } from '../lib';
import { describeVeth } from './helpers';

jest.setTimeout(240_000);

const VETH = path.join(DIST_BIN, 'veth');
const MACVLAN = '/usr/lib/cni/macvlan';

function killAfter(
  node: Netns,
  env: Record<string, string>,
  stdin: string,
  delayMs: number,
): Promise<{ code: number | null; signal: string | null }> {
  return new Promise((resolve) => {
    const argv = ['netns', 'exec', node.name, 'env', '-i', ...Object.entries(env).map(([k, v]) => `${k}=${v}`), VETH];
    const child = spawn('ip', argv, { stdio: ['pipe', 'ignore', 'ignore'] });
    child.stdin.end(stdin);
    const timer = setTimeout(() => child.kill('SIGKILL'), delayMs);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal });
    });
  });
}

/** veth's config chained after macvlan: `prevResult` is macvlan's result. */
function vethConfAfter(topo: MacvlanNode, prevResult: unknown): Record<string, unknown> {
  return {
    cniVersion: '1.0.0',
    name: 'mv',
    type: 'veth',
    overlay_hijack_subnet: [topo.overlayCidr4],
    service_hijack_subnet: [topo.serviceCidr4],
    log_options: { log_file: path.join(os.tmpdir(), 'cnikit-e2e-interrupted.log') },
    prevResult,
  };
}

/** Wall time of one complete veth ADD (macvlan done first), cleaned up afterwards. */
async function timedAdd(topo: MacvlanNode, base: Record<string, string>, macvlanConf: Record<string, unknown>): Promise<number> {
  const pod = await Netns.create('pod');
  try {
    const env = { ...base, CNI_CONTAINERID: 'interrupt-timing', CNI_NETNS: pod.path };
    const mv = await execPlugin(MACVLAN, { ...env, CNI_COMMAND: 'ADD' }, macvlanConf, topo.node);
    const conf = vethConfAfter(topo, mv.json);
    const t0 = Date.now();
    const add = await execPlugin(VETH, { ...env, CNI_COMMAND: 'ADD' }, conf, topo.node);
    const ms = Date.now() - t0;
    expect(add.code).toBe(0);
    await execPlugin(VETH, { ...env, CNI_COMMAND: 'DEL' }, conf, topo.node);
    await execPlugin(MACVLAN, { ...env, CNI_COMMAND: 'DEL' }, macvlanConf, topo.node);
    return ms;
  } finally {
    await pod.delete();
  }
}

describeVeth('veth ADD interrupted by SIGKILL, then DEL', () => {
  let topo: MacvlanNode;
  let pod: Netns;
  beforeAll(async () => {
    topo = await macvlanNode({ ipv6: false });
  });
  afterAll(async () => {
    await topo?.destroy();
  });

  it('leaves the node as it was at every kill point', async () => {
    const s = topo.segments[0]!;
    const base = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', CNI_PATH: '/usr/lib/cni', CNI_IFNAME: 'eth0' };
    const macvlanConf = {
      cniVersion: '1.0.0',
      name: 'mv',
      type: 'macvlan',
      master: s.uplink,
      mode: 'bridge',
      ipam: { type: 'static', addresses: [{ address: `${s.rangeStart4}/24`, gateway: s.extIP4 }] },
    };
    const before = await snapshot(topo.node, [s.rangeStart4]);
    const killed: string[] = [];
    // Kill points spread over the length of a whole ADD on this machine right now (it varies with load).
    const full = await timedAdd(topo, base, macvlanConf);
    const delays = [0.05, 0.2, 0.35, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0, 1.2].map((f) => Math.max(1, Math.round(full * f)));
    let partial = 0;
    for (const delay of delays) {
      pod = await Netns.create('pod');
      const env = { ...base, CNI_CONTAINERID: `interrupt${delay}`, CNI_NETNS: pod.path };
      const mv = await execPlugin(MACVLAN, { ...env, CNI_COMMAND: 'ADD' }, macvlanConf, topo.node);
      expect(mv.code).toBe(0);
      const vethConf = vethConfAfter(topo, mv.json);
      const r = await killAfter(topo.node, { ...env, CNI_COMMAND: 'ADD' }, JSON.stringify(vethConf), delay);
      killed.push(`${delay}ms:${r.signal ?? `exit ${r.code}`}`);
      if (diffSnapshots(before, await snapshot(topo.node, [s.rangeStart4])).some((l) => l.includes('veth'))) partial++;
      // The runtime's DEL after a failed ADD: reverse order, veth then macvlan.
      const del = await execPlugin(VETH, { ...env, CNI_COMMAND: 'DEL' }, vethConf, topo.node);
      expect(del.stdout).toBe('');
      expect(del.code).toBe(0);
      expect((await execPlugin(MACVLAN, { ...env, CNI_COMMAND: 'DEL' }, macvlanConf, topo.node)).code).toBe(0);
      expect(diffSnapshots(before, await snapshot(topo.node, [s.rangeStart4]))).toEqual([]);
      // And the pod still exists with no veth0 left in it.
      expect((await pod.ipJson<{ ifname: string }>('link', 'show')).map((l) => l.ifname)).not.toContain('veth0');
      await pod.delete();
    }
    // The spread must have hit both sides: some runs killed, some completed before the kill.
    expect(killed.some((k) => k.includes('SIGKILL'))).toBe(true);
    console.log(`full ADD ${full} ms; kill points: ${killed.join(' ')}; ${partial} left a host veth before DEL`);
  });
});
