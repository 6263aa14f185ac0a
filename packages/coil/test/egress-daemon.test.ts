// coil-egress's watch loop against the real kube-apiserver (globalSetup): annotated Pods become
// tunnel peers, the Egress's fouSourcePortAuto sets the sport mode, deleted Pods drop out. The
// kernel side is a recorder here (the host kernel has no FoU; the kernel lab runs router.ts for real).
import { Namespaces, Pods, ResourceClient, type KubeTransport, type Pod } from '@cnikit/kube';
import { uniqueName } from '@cnikit/kube-testing';
import { hostNetns } from '@cnikit/netlib';
import { RouterDaemon, type RouterDatapath } from '../src/egress/daemon';
import type { RouterConfig } from '../src/egress/router-plan';
import { Egresses } from '../src/api/egress';
import { eventually, installCoilCrds, transport } from './support';

let t: KubeTransport;
beforeAll(async () => {
  t = transport();
  await installCoilCrds(t);
});

function recorder(): RouterDatapath & { configs: RouterConfig[]; snat: number } {
  const r = {
    configs: [] as RouterConfig[],
    snat: 0,
    async reconcile(_ns: unknown, cfg: RouterConfig) {
      r.configs.push(cfg);
      return { created: [], changed: [], removed: [], clients: cfg.clients.length };
    },
    async ensureSnat() {
      r.snat++;
      return true;
    },
  };
  return r;
}

async function namespace(prefix: string): Promise<string> {
  const name = uniqueName(prefix);
  await new ResourceClient(t, Namespaces).create({ metadata: { name } });
  return name;
}

async function clientPod(ns: string, name: string, annotations: Record<string, string>, ips: string[]): Promise<Pod> {
  const pods = new ResourceClient(t, Pods, { namespace: ns });
  await pods.create({ metadata: { name, namespace: ns, annotations }, spec: { containers: [{ name: 'c', image: 'busybox' }] } });
  return pods.patchStatus(name, { status: { phase: 'Running', podIP: ips[0], podIPs: ips.map((ip) => ({ ip })) } });
}

const last = (r: { configs: RouterConfig[] }): RouterConfig | undefined => r.configs[r.configs.length - 1];

test('annotated pods become clients; sport follows the Egress; deleted pods are dropped', async () => {
  const egressNs = await namespace('egr');
  const appNs = await namespace('app');
  const egresses = new ResourceClient(t, Egresses, { namespace: egressNs });
  await egresses.create({
    metadata: { name: 'nat', namespace: egressNs },
    spec: { destinations: ['0.0.0.0/0'], fouSourcePortAuto: false },
  });
  const dp = recorder();
  const d = new RouterDaemon({
    transport: t,
    ns: hostNetns(),
    namespace: egressNs,
    podName: 'nat-0',
    egressName: 'nat',
    podIPv4: '10.72.49.1',
    backend: 'iptables',
    datapath: dp,
    resyncMs: 60_000,
  });
  await d.start();
  try {
    expect(dp.snat).toBe(1);
    await eventually('first pass', () => last(dp) && d.isReady());
    expect(last(dp)).toMatchObject({ podIPv4: '10.72.49.1', fouPort: 5555, sportAuto: false, clients: [] });

    const key = `egress.coil.cybozu.com/${egressNs}`;
    await clientPod(appNs, 'a', { [key]: 'other,nat' }, ['10.64.0.65', 'fd00:64::65']);
    await clientPod(appNs, 'b', { [key]: 'other' }, ['10.64.0.66']);
    await clientPod(appNs, 'c', { 'egress.coil.cybozu.com/elsewhere': 'nat' }, ['10.64.0.67']);
    await eventually('client a', () => last(dp)?.clients.join() === '10.64.0.65,fd00:64::65');
    expect(d.clientCount).toBe(2);

    await egresses.patch('nat', { spec: { fouSourcePortAuto: true } });
    await eventually('sport auto', () => last(dp)?.sportAuto === true);

    await new ResourceClient(t, Pods, { namespace: appNs }).delete('a', { gracePeriodSeconds: 0 });
    await eventually('client a gone', () => last(dp)?.clients.length === 0);
  } finally {
    await d.stop();
  }
});

test('no Egress object: fixed source port', async () => {
  const egressNs = await namespace('egr');
  const dp = recorder();
  const d = new RouterDaemon({
    transport: t,
    ns: hostNetns(),
    namespace: egressNs,
    podName: 'x-0',
    egressName: 'missing',
    podIPv4: '10.72.49.2',
    backend: 'nftables',
    datapath: dp,
  });
  await d.start();
  try {
    await eventually('first pass', () => last(dp));
    expect(last(dp)?.sportAuto).toBe(false);
  } finally {
    await d.stop();
  }
});
