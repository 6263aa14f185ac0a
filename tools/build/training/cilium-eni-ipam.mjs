// Training scenario of `cilium-eni-ipam` (tools/build/lib/train.mjs): STATUS, which containerd 2.x runs on every
// runtime status poll, against a stand-in cilium-eni-agent (stand-ins.mjs: a pool with free addresses). ADD and DEL
// need the agent's routing in network namespaces and are not trained: they start from VERSION's cache.
import * as path from 'node:path';
import { jsonLineStandIn } from './stand-ins.mjs';

export const needsKernel = false;

export async function train(t) {
  const socket = path.join(t.work, 'agent.sock');
  const server = await jsonLineStandIn(socket, { ok: true, pool: 8, used: 0, free: 8 });
  try {
    const conf = { cniVersion: '1.1.0', name: 'cilium', type: 'ptp', ipam: { type: 'cilium-eni-ipam', socket } };
    t.call({ CNI_COMMAND: 'STATUS', CNI_PATH: '/nonexistent', PATH: '/nonexistent' }, JSON.stringify(conf));
  } finally {
    server.stop();
  }
}
