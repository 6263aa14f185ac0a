// Training scenario of `terway` (tools/build/lib/train.mjs): STATUS, which containerd 2.x runs on every runtime
// status poll, against a stand-in terwayd (stand-ins.mjs: GetIPInfo answered with an empty reply, no error). ADD
// and DEL need terwayd's datapath in network namespaces and are not trained: they start from VERSION's cache.
import * as path from 'node:path';
import { grpcStandIn } from './stand-ins.mjs';

export const needsKernel = false;

export async function train(t) {
  const socket = path.join(t.work, 'eni.socket');
  const server = await grpcStandIn(socket);
  try {
    const conf = { cniVersion: '1.1.0', name: 'terway', type: 'terway', socket };
    t.call({ CNI_COMMAND: 'STATUS', CNI_PATH: '/nonexistent', PATH: '/nonexistent' }, JSON.stringify(conf));
  } finally {
    server.stop();
  }
}
