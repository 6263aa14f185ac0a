// Training scenario of `coil` (tools/build/lib/train.mjs): ADD, CHECK, STATUS and DEL against a stand-in for
// coild, so the thin client's HTTP/2 and gRPC code is in the cache. The stand-in (stand-ins.mjs) answers Add with a
// fixed result and every other method with an empty message. Needs no root.
import * as path from 'node:path';
import { grpcStandIn } from './stand-ins.mjs';

export const needsKernel = false;

/** protobuf varint, for AddResponse { bytes result = 1 }. */
const varint = (n) => {
  const b = [];
  while (n > 127) {
    b.push((n & 127) | 128);
    n >>>= 7;
  }
  b.push(n);
  return Buffer.from(b);
};

export async function train(t) {
  const socket = path.join(t.work, 'coild.sock');
  const result = JSON.stringify({
    cniVersion: '1.0.0',
    interfaces: [{ name: 'eth0', mac: '0a:58:0a:8c:00:05', sandbox: '/var/run/netns/train' }],
    ips: [{ address: '10.140.0.5/32', gateway: '10.140.0.1', interface: 0 }],
    routes: [{ dst: '0.0.0.0/0', gw: '10.140.0.1' }],
  });
  const add = Buffer.concat([Buffer.from([0x0a]), varint(Buffer.byteLength(result)), Buffer.from(result)]);
  const server = await grpcStandIn(socket, { '/Add': add });
  try {
    const conf = JSON.stringify({ cniVersion: '1.0.0', name: 'k8s-pod-network', type: 'coil', socket });
    const env = (command) => ({
      CNI_COMMAND: command,
      CNI_CONTAINERID: `${t.id}0123456789`,
      CNI_NETNS: '/var/run/netns/train',
      CNI_IFNAME: 'eth0',
      CNI_PATH: '/nonexistent',
      CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAME=p;K8S_POD_NAMESPACE=default',
      PATH: '/nonexistent',
    });
    t.call(env('ADD'), conf);
    t.call(env('CHECK'), conf);
    // containerd 2.x asks every plugin of a 1.1.0 conflist for STATUS on each runtime status poll.
    t.call(env('STATUS'), JSON.stringify({ ...JSON.parse(conf), cniVersion: '1.1.0' }));
    t.call(env('DEL'), conf);
  } finally {
    server.stop();
  }
}
