/**
 * The real `coil-egress` program (src/cmd/coil-egress.ts, bundled by the lab like any scenario) against
 * the real kube-apiserver the host test started (reached at 10.0.2.2 through qemu's user network;
 * kubeconfig in $LAB_RUN/kubeconfig, TLS checked against the certificate's "localhost" name).
 *
 * Topology as coil-egress-topo.ts. The client pod's netns is set up as coild would (reconcileNatClient,
 * fouSourcePortAuto true as the Egress object says); the daemon runs for the router pod (--netns).
 * Annotating the client's Pod object makes the daemon create the tunnel back to it, with the
 * Egress's sport mode; internet traffic then goes out through the router and comes back tunnelled;
 * deleting the Pod removes the tunnel; SIGTERM ends the daemon cleanly.
 */
import { spawn } from 'node:child_process';
import { Namespaces, Pods, ResourceClient, connect, installCrd } from '@cnikit/kube';
import { coilCrds } from '../../../packages/coil/src/api/crds';
import { Egresses } from '../../../packages/coil/src/api/egress';
import { link, tunnel } from '@cnikit/netlib';
import { reconcileNatClient } from '../../../packages/coil/src/egress/nat-client';
import { fouLinkName } from '../../../packages/coil/src/egress/names';
import { readNftTable } from '../../../packages/coil/src/egress/snat';
import { check, linkStats, result, scenario, waitFor } from './guest';
import { buildTopology, CLIENT, FOU_PORT, INTERNET, ROUTER, seenFrom, SERVICE } from './coil-egress-topo';

const RUN = process.env.LAB_RUN ?? '.';
const KUBECONFIG = `${RUN}/kubeconfig`;
const BIN = `${RUN}/bundles/coil-egress-bin.js`;
const METRICS = '127.0.0.1:18080';
const HEALTH = '127.0.0.1:18081';

const get = async (url: string): Promise<{ status: number; text: string }> => {
  const r = await fetch(url);
  return { status: r.status, text: await r.text() };
};

scenario(async () => {
  const t = await buildTopology();
  const kube = connect({ kubeconfig: KUBECONFIG });
  const pods = new ResourceClient(kube, Pods, { namespace: 'app' });
  // What the cluster holds before coil-egress starts: Coil's CRDs, the Egress (sport auto) in its
  // namespace, and the client's namespace.
  for (const crd of coilCrds()) await installCrd(kube, crd);
  for (const name of ['internet', 'app']) await new ResourceClient(kube, Namespaces).create({ metadata: { name } });
  await new ResourceClient(kube, Egresses, { namespace: 'internet' }).create({
    metadata: { name: 'egress', namespace: 'internet' },
    spec: { destinations: ['203.0.113.0/24', '2001:db8:1::/64'], fouSourcePortAuto: true },
  });
  const rtun4 = fouLinkName(CLIENT.v4);
  const rtun6 = fouLinkName(CLIENT.v6);

  await reconcileNatClient(t.client.ns.path, {
    fouPort: FOU_PORT,
    podIPv4: CLIENT.v4,
    podIPv6: CLIENT.v6,
    egresses: [
      {
        namespace: 'internet',
        name: 'egress',
        peerIPv4: SERVICE.v4,
        peerIPv6: SERVICE.v6,
        destinations: ['203.0.113.0/24', '2001:db8:1::/64'],
        fouSourcePortAuto: true,
      },
    ],
  });
  await pods.create({ metadata: { name: 'client', namespace: 'app' }, spec: { containers: [{ name: 'c', image: 'busybox' }] } });
  await pods.patchStatus('client', { status: { phase: 'Running', podIP: CLIENT.v4, podIPs: [{ ip: CLIENT.v4 }, { ip: CLIENT.v6 }] } });

  const t0 = Date.now();
  const daemon = spawn(
    process.execPath,
    [
      BIN,
      '--kubeconfig',
      KUBECONFIG,
      '--netns',
      t.router.ns.path,
      '--backend',
      'nftables',
      '--metrics-addr',
      METRICS,
      '--health-addr',
      HEALTH,
    ],
    {
      env: {
        ...process.env,
        COIL_POD_NAMESPACE: 'internet',
        COIL_POD_NAME: 'egress-0',
        COIL_EGRESS_NAME: 'egress',
        COIL_POD_ADDRESSES: `${ROUTER.v4},${ROUTER.v6}`,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let log = '';
  daemon.stdout.on('data', (d: Buffer) => (log += d.toString()));
  daemon.stderr.on('data', (d: Buffer) => (log += d.toString()));
  const exited = new Promise<number | null>((resolve) => daemon.once('exit', (code) => resolve(code)));
  try {
    await waitFor('coil-egress /readyz', async () => (await get(`http://${HEALTH}/readyz`)).status === 200, 90_000);
    const readyMs = Date.now() - t0;
    check((await get(`http://${HEALTH}/healthz`)).status === 200, 'healthz');
    check((await link.find(t.router.ns, rtun4)) === undefined, `${rtun4} exists before the pod asked for NAT`);
    const nft = await readNftTable(t.router.ns);
    check(nft?.rules.length === 2, `nftables SNAT table in the router: ${JSON.stringify(nft)}`);

    // The pod asks for NAT through this Egress: the daemon creates the tunnels back to it.
    const tAnnotate = Date.now();
    await pods.patch('client', { metadata: { annotations: { 'egress.coil.cybozu.com/internet': 'egress' } } });
    await waitFor(
      'router tunnels to the client',
      async () => (await link.find(t.router.ns, rtun4)) && (await link.find(t.router.ns, rtun6)),
      30_000,
    );
    const tunnelMs = Date.now() - tAnnotate;
    const d4 = await tunnel.details(t.router.ns, rtun4);
    const d6 = await tunnel.details(t.router.ns, rtun6);
    check(
      d4.tunnel?.remote === CLIENT.v4 &&
        d4.tunnel.local === ROUTER.v4 &&
        d4.tunnel.encap?.sport === 0 &&
        d4.tunnel.encap.dport === FOU_PORT,
      `router ${rtun4}: ${JSON.stringify(d4.tunnel)}`,
    );
    check(d6.tunnel?.remote === CLIENT.v6 && d6.tunnel.encap?.sport === 0, `router ${rtun6}: ${JSON.stringify(d6.tunnel)}`);

    const back = (): number => linkStats(t.client.name, 'coil_ipip4').rx + linkStats(t.client.name, 'coil_ipip6').rx;
    const before = back();
    const seen4 = await seenFrom(t, INTERNET.v4);
    const seen6 = await seenFrom(t, INTERNET.v6);
    const tunnelled = back() - before;
    check(seen4 === ROUTER.v4 && seen6 === ROUTER.v6, `internet saw ${seen4} / ${seen6}, expected the router ${ROUTER.v4} / ${ROUTER.v6}`);
    check(tunnelled > 0, 'replies did not come back through the tunnel (sport auto -> catch-all)');

    const metrics = (await get(`http://${METRICS}/metrics`)).text;
    const count = /^coil_egress_client_count\{namespace="internet",pod="egress-0",egress="egress"\} (\d+)$/m.exec(metrics)?.[1];
    check(count === '2', `coil_egress_client_count: ${count}`);
    const limit = /^coil_egress_nf_conntrack_entries_limit\{namespace="internet",pod="egress-0"\} (\d+)$/m.exec(metrics)?.[1];
    check(Number(limit) > 0, `coil_egress_nf_conntrack_entries_limit: ${limit}`);

    // The pod goes away: so do its tunnels.
    await pods.delete('client', { gracePeriodSeconds: 0 });
    await waitFor(
      'router tunnels removed',
      async () => (await link.find(t.router.ns, rtun4)) === undefined && (await link.find(t.router.ns, rtun6)) === undefined,
      30_000,
    );

    daemon.kill('SIGTERM');
    const code = await exited;
    check(code === 0, `coil-egress exited ${code} on SIGTERM`);
    result('daemon', { readyMs, tunnelMs, seen4, seen6, tunnelled, clientCount: Number(count), conntrackLimit: Number(limit) });
  } catch (err) {
    process.stdout.write(`--- coil-egress log\n${log}\n---\n`);
    throw err;
  } finally {
    daemon.kill('SIGKILL');
  }
});
