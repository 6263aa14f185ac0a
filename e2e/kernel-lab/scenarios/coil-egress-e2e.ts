/**
 * Coil egress end to end, both halves together, against the real kube-apiserver the host test started
 * (reached at 10.0.2.2; kubeconfig in $LAB_RUN/kubeconfig, as in coil-egress-daemon.ts):
 *
 * - router half: the real `coil-egress` program (the bundle of src/cmd/coil-egress.ts) for the router pod (--netns);
 * - client half: coild's real EgressClient (src/coild/egress.ts) with the REAL NAT client (defaultNatClient(),
 *   wrapped only to count calls), driven the way Coild.add() drives it (plan -> configFor -> apply -> register),
 *   then, after a "coild restart", through its start-up path: the pod found by address (Pod status.podIPs)
 *   among the attachments PodNetwork.list() reads from the kernel, its netns found from the host veth
 *   (netns-finder.ts), no path given.
 *
 * Topology as coil-egress-topo.ts; the topology's host veth c0 gets the COIL: alias and table-116 routes
 * coild's PodNetwork.setup would have given it, so that PodNetwork.list() sees the client pod. The Egress
 * Service is created with the ClusterIPs the topology's DNAT maps to the router pod (10.96.0.10 and, when
 * the API server has an IPv6 service range, fd00:96::10).
 *
 * Steps (each timed): ADD; real TCP through the router; Egress destinations edited through the API (added,
 * then the first removed) followed live by the running pod; fouSourcePortAuto toggled live (same device,
 * sport auto <-> 5555, router too); coild restart (an edit made while it was down is caught up, netns found
 * from the veth); Pod deleted -> the router removes its tunnels.
 */
import { spawn } from 'node:child_process';
import { statSync } from 'node:fs';
import { Namespaces, Pods, ResourceClient, connect, installCrd, type Logger } from '@cnikit/kube';
import { link, route, tunnel } from '@cnikit/netlib';
import { Registry } from '@cnikit/kube/prom';
import { coilCrds } from '../../../packages/coil/src/api/crds';
import { Egresses, Services } from '../../../packages/coil/src/api/egress';
import { EgressClient, defaultNatClient, type NatClient, type NatClientConfig } from '../../../packages/coil/src/coild/egress';
import { PodNetwork, podAlias } from '../../../packages/coil/src/coild/podnetwork';
import { fouLinkName } from '../../../packages/coil/src/egress/names';
import { KeyedMutex } from '../../../packages/coil/src/util';
import { check, linkStats, result, run, scenario, waitFor } from './guest';
import { buildTopology, CLIENT, FOU_PORT, INTERNET, OTHER, ROUTER, seenFrom, SERVICE, type Topology } from './coil-egress-topo';

const RUN = process.env.LAB_RUN ?? '.';
const KUBECONFIG = `${RUN}/kubeconfig`;
const BIN = `${RUN}/bundles/coil-egress-bin.js`;
const HEALTH = '127.0.0.1:18091';
const METRICS = '127.0.0.1:18090';
const NODE_NAME = 'kl-node';
const CONTAINER_ID = 'c0ffee0123456789';
const EG_NS = 'internet';
const EG_NAME = 'egress';
const APP_NS = 'app';
const POD = 'client';
const D1 = { v4: '203.0.113.0/24', v6: '2001:db8:1::/64' }; // INTERNET's networks
const D2 = { v4: '198.51.100.0/24', v6: '2001:db8:2::/64' }; // OTHER's networks

/** JSON with object keys sorted (key order is not part of the configuration). */
const canon = (v: unknown): string =>
  JSON.stringify(v, (_k, x: unknown) =>
    x && typeof x === 'object' && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort(([p], [q]) => p.localeCompare(q))) : x,
  );

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A logger keeping EgressClient's lines (the "why" of each live update), printed when a check fails. */
function recordingLogger(lines: string[]): Logger {
  const w =
    (level: string) =>
    (msg: string, fields?: Record<string, unknown>): void => {
      lines.push(
        `${new Date().toISOString()} ${level} ${msg} ${JSON.stringify(fields ?? {}, (_k, v: unknown) => (v instanceof Error ? v.message : v))}`,
      );
    };
  return { debug: () => undefined, info: w('info'), warn: w('warn'), error: w('error') };
}

scenario(async () => {
  const timings: Record<string, number> = {};
  const lap = (name: string, t0: number): number => (timings[name] = Date.now() - t0);
  const tAll = Date.now();

  let t0 = Date.now();
  const t: Topology = await buildTopology();
  // What coild's PodNetwork.setup would have left on the node for this pod: the host veth's COIL: alias and
  // the table-116 host routes (no ip rule points at 116 here: the topology's own routes keep working).
  const c0 = await link.get(t.node.ns, 'c0');
  await link.setAlias(t.node.ns, c0.index, podAlias('default', CONTAINER_ID, 'eth0'));
  await route.add(t.node.ns, { dst: `${CLIENT.v4}/32`, oif: c0.index, table: 116, scope: 253, protocol: 30 });
  await route.add(t.node.ns, { dst: `${CLIENT.v6}/128`, oif: c0.index, table: 116, family: 6, protocol: 30 });
  lap('topology', t0);

  // ---- 1. The cluster: CRDs, Egress, its Service (ClusterIPs = the topology's DNAT), the client Pod.
  t0 = Date.now();
  const kube = connect({ kubeconfig: KUBECONFIG });
  for (const crd of coilCrds()) await installCrd(kube, crd);
  for (const name of [EG_NS, APP_NS]) await new ResourceClient(kube, Namespaces).create({ metadata: { name } });
  const egresses = new ResourceClient(kube, Egresses, { namespace: EG_NS });
  const services = new ResourceClient(kube, Services, { namespace: EG_NS });
  const pods = new ResourceClient(kube, Pods, { namespace: APP_NS });
  const labels = { 'app.kubernetes.io/name': 'coil', 'app.kubernetes.io/component': 'egress', 'app.kubernetes.io/instance': EG_NAME };
  const svcSpec = { type: 'ClusterIP', selector: labels, ports: [{ name: 'fou', port: FOU_PORT, targetPort: FOU_PORT, protocol: 'UDP' }] };
  // Dual-stack when the API server has an IPv6 service range (the host test gives it one); else IPv4 only.
  let dualStack = true;
  try {
    await services.create({
      metadata: { name: EG_NAME, namespace: EG_NS, labels },
      spec: {
        ...svcSpec,
        ipFamilyPolicy: 'RequireDualStack',
        ipFamilies: ['IPv4', 'IPv6'],
        clusterIP: SERVICE.v4,
        clusterIPs: [SERVICE.v4, SERVICE.v6],
      },
    });
  } catch (err) {
    process.stdout.write(`dual-stack Service refused (${(err as Error).message}); IPv4 only\n`);
    dualStack = false;
    await services.create({ metadata: { name: EG_NAME, namespace: EG_NS, labels }, spec: { ...svcSpec, clusterIP: SERVICE.v4 } });
  }
  const svc = await services.get(EG_NAME);
  check(
    svc.spec.clusterIPs?.join() === (dualStack ? `${SERVICE.v4},${SERVICE.v6}` : SERVICE.v4),
    `Service ClusterIPs ${JSON.stringify(svc.spec.clusterIPs)}`,
  );
  const fams = (x: { v4: string; v6: string }): string[] => (dualStack ? [x.v4, x.v6] : [x.v4]);
  await egresses.create({
    metadata: { name: EG_NAME, namespace: EG_NS },
    spec: { destinations: [D1.v4, D1.v6], fouSourcePortAuto: false },
  });
  // The Pod as kubelet has it at ADD time: scheduled to the node, annotated; no addresses yet.
  const pod = await pods.create({
    metadata: { name: POD, namespace: APP_NS, annotations: { [`egress.coil.cybozu.com/${EG_NS}`]: EG_NAME } },
    spec: { nodeName: NODE_NAME, containers: [{ name: 'c', image: 'busybox' }] },
  });
  lap('1.cluster', t0);

  // ---- 2a. The router: the real coil-egress program in the router pod's netns.
  t0 = Date.now();
  const daemon = spawn(
    process.execPath,
    [
      BIN,
      '--kubeconfig',
      KUBECONFIG,
      '--netns',
      t.router.ns.path,
      '--backend',
      'iptables',
      '--metrics-addr',
      METRICS,
      '--health-addr',
      HEALTH,
    ],
    {
      env: {
        ...process.env,
        COIL_POD_NAMESPACE: EG_NS,
        COIL_POD_NAME: 'egress-0',
        COIL_EGRESS_NAME: EG_NAME,
        COIL_POD_ADDRESSES: `${ROUTER.v4},${ROUTER.v6}`,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let daemonLog = '';
  daemon.stdout.on('data', (d: Buffer) => (daemonLog += d.toString()));
  daemon.stderr.on('data', (d: Buffer) => (daemonLog += d.toString()));
  const exited = new Promise<number | null>((resolve) => daemon.once('exit', (code) => resolve(code)));

  // ---- 2b. coild's client half: EgressClient with the real NAT client (counted, not replaced).
  const coildLog: string[] = [];
  const real = defaultNatClient();
  const natCalls: { phase: string; op: string; netns: string; cfg?: NatClientConfig; ms: number }[] = [];
  /** Which step the NAT client calls belong to (ADD, live updates, restart...). */
  let phase = 'add';
  const nat: NatClient = {
    async reconcileNatClient(p, c) {
      const call = { phase, op: 'reconcile', netns: p, cfg: JSON.parse(JSON.stringify(c)) as NatClientConfig, ms: -1 };
      natCalls.push(call);
      const s = Date.now();
      await real.reconcileNatClient(p, c);
      call.ms = Date.now() - s;
    },
    async removeNatClient(p) {
      natCalls.push({ phase, op: 'remove', netns: p, ms: 0 });
      await real.removeNatClient(p);
    },
    readNatClient: (p) => real.readNatClient(p),
  };
  const locks = new KeyedMutex();
  /** Waits for a NAT client run in progress (they run under the pod's container lock, as in coild). */
  const idle = (): Promise<void> => locks.run(CONTAINER_ID, async () => undefined);
  const newClient = (): EgressClient =>
    new EgressClient({
      transport: kube,
      nodeName: NODE_NAME,
      hostNs: t.node.ns,
      fouPort: FOU_PORT,
      natClient: nat,
      registry: new Registry(),
      logger: recordingLogger(coildLog),
      lock: (id, fn) => locks.run(id, fn),
    });
  const read = (): ReturnType<NatClient['readNatClient']> => real.readNatClient(t.client.ns.path);
  const destsOf = async (): Promise<string[]> => (await read()).peers.flatMap((p) => p.destinations).sort();
  const tun4 = fouLinkName(SERVICE.v4);
  const tun6 = fouLinkName(SERVICE.v6);
  const rtun4 = fouLinkName(CLIENT.v4);
  const rtun6 = fouLinkName(CLIENT.v6);
  const tunsOf = (): string[] => (dualStack ? [tun4, tun6] : [tun4]);
  const tx = (): number => tunsOf().reduce((n, d) => n + linkStats(t.client.name, d).tx, 0);

  let ec = newClient();
  try {
    await ec.start([]);
    timings['2.coildStart'] = Date.now() - t0;
    // ADD, as Coild.add() calls it: plan (Pod from the node cache by UID, else GET) -> configFor with the pod's
    // addresses -> apply on the runtime's netns path -> register.
    const tAdd = Date.now();
    const plan = await ec.plan(APP_NS, POD, pod.metadata.uid);
    check(plan?.length === 1, `plan: ${JSON.stringify(plan)}`);
    const cfg = ec.configFor(plan, CLIENT.v4, CLIENT.v6);
    const expectCfg: NatClientConfig = {
      fouPort: FOU_PORT,
      podIPv4: CLIENT.v4,
      podIPv6: CLIENT.v6,
      egresses: [
        {
          namespace: EG_NS,
          name: EG_NAME,
          peerIPv4: SERVICE.v4,
          ...(dualStack ? { peerIPv6: SERVICE.v6 } : {}),
          destinations: fams(D1),
          fouSourcePortAuto: false,
        },
      ],
    };
    check(canon(cfg) === canon(expectCfg), `configFor: ${canon(cfg)}\nexpected ${canon(expectCfg)}`);
    await ec.apply(t.client.ns.path, cfg);
    ec.register({
      containerId: CONTAINER_ID,
      ifname: 'eth0',
      podNamespace: APP_NS,
      podName: POD,
      hostIndex: c0.index,
      ipv4: CLIENT.v4,
      ipv6: CLIENT.v6,
      netns: t.client.ns.path,
      egresses: [{ namespace: EG_NS, name: EG_NAME }],
    });
    lap('2.add', tAdd);
    // kubelet writes the addresses after ADD: the router now sees a client.
    await pods.patchStatus(POD, { status: { phase: 'Running', podIP: CLIENT.v4, podIPs: [{ ip: CLIENT.v4 }, { ip: CLIENT.v6 }] } });
    const index4 = (await link.get(t.client.ns, tun4)).index;
    check(JSON.stringify(await destsOf()) === JSON.stringify(fams(D1).sort()), `client routes after ADD: ${JSON.stringify(await read())}`);

    const get = async (url: string): Promise<number> => (await fetch(url)).status;
    await waitFor('coil-egress /readyz', async () => (await get(`http://${HEALTH}/readyz`)) === 200, 90_000);
    await waitFor(
      'router tunnels to the client',
      async () => (await link.find(t.router.ns, rtun4)) && (await link.find(t.router.ns, rtun6)),
      30_000,
    );
    lap('2.routerReady', t0);

    // ---- 3. Real TCP: Egress destinations through the router, anything else direct.
    t0 = Date.now();
    const seen: Record<string, string> = {};
    const through = async (label: string, dst: string): Promise<void> => {
      const before = tx();
      const s = await seenFrom(t, dst);
      seen[label] = s;
      const want = dst.includes(':') ? ROUTER.v6 : ROUTER.v4;
      check(s === want, `${label}: ${dst} saw ${s}, expected the router ${want}`);
      check(tx() > before, `${label}: nothing went through the client's tunnel to ${dst}`);
    };
    const direct = async (label: string, dst: string): Promise<void> => {
      const before = tx();
      const s = await seenFrom(t, dst);
      seen[label] = s;
      const want = dst.includes(':') ? CLIENT.v6 : CLIENT.v4;
      check(s === want, `${label}: ${dst} saw ${s}, expected the client itself ${want} (not tunnelled)`);
      check(tx() === before, `${label}: ${tx() - before} packets went through the client's tunnel to ${dst}`);
    };
    const rx4before = linkStats(t.client.name, tun4).rx;
    for (const a of fams(INTERNET)) await through(`step3 in ${a}`, a);
    check(linkStats(t.client.name, tun4).rx > rx4before, `replies did not come back on ${tun4} (fixed sport)`);
    for (const a of fams(OTHER)) await direct(`step3 out ${a}`, a);
    lap('3.tcp', t0);

    // ---- 4. Live update: destinations edited through the API; no restart, no ADD.
    const callsBefore = natCalls.length;
    await idle();
    phase = 'live-destinations';
    t0 = Date.now();
    await egresses.patch(EG_NAME, { spec: { destinations: [D1.v4, D1.v6, D2.v4, D2.v6] } });
    await waitFor(
      'second destination routed',
      async () => JSON.stringify(await destsOf()) === JSON.stringify([...fams(D1), ...fams(D2)].sort()),
      30_000,
    );
    lap('4.addDestination', t0);
    t0 = Date.now();
    for (const a of fams(OTHER)) await through(`step4 added ${a}`, a);
    lap('4.addDestinationTcp', t0);
    t0 = Date.now();
    await egresses.patch(EG_NAME, { spec: { destinations: [D2.v4, D2.v6] } });
    await waitFor('first destination unrouted', async () => JSON.stringify(await destsOf()) === JSON.stringify(fams(D2).sort()), 30_000);
    lap('4.removeDestination', t0);
    t0 = Date.now();
    for (const a of fams(INTERNET)) await direct(`step4 removed ${a}`, a);
    for (const a of fams(OTHER)) await through(`step4 still ${a}`, a);
    lap('4.removeDestinationTcp', t0);
    check((await link.get(t.client.ns, tun4)).index === index4, `${tun4} was re-created by the destination edits`);
    const liveCalls = natCalls.slice(callsBefore);
    check(
      liveCalls.length >= 2 && liveCalls.every((c) => c.op === 'reconcile' && c.netns === t.client.ns.path),
      `live updates: ${JSON.stringify(liveCalls.map((c) => [c.op, c.netns]))}`,
    );

    // ---- 5. fouSourcePortAuto toggled live: the client's device changes in place (and the router's).
    const sportOf = async (ns: Topology['client'], dev: string): Promise<number | undefined> =>
      (await tunnel.details(ns.ns, dev)).tunnel?.encap?.sport;
    const sports = async (v: number): Promise<boolean> => {
      for (const d of tunsOf()) if ((await sportOf(t.client, d)) !== v) return false;
      for (const d of dualStack ? [rtun4, rtun6] : [rtun4]) if ((await sportOf(t.router, d)) !== v) return false;
      return true;
    };
    check(await sports(FOU_PORT), 'sport not 5555 before the toggle');
    await idle();
    phase = 'live-sport';
    t0 = Date.now();
    await egresses.patch(EG_NAME, { spec: { fouSourcePortAuto: true } });
    await waitFor('encap sport auto (client and router)', () => sports(0), 30_000);
    lap('5.sportAuto', t0);
    check((await link.get(t.client.ns, tun4)).index === index4, `${tun4} was re-created by the sport toggle`);
    const autoLink = run('ip', ['-n', t.client.name, '-d', 'link', 'show', tun4]);
    const catchAll = linkStats(t.client.name, 'coil_ipip4').rx;
    await through(`step5 auto ${OTHER.v4}`, OTHER.v4);
    const catchAllRx = linkStats(t.client.name, 'coil_ipip4').rx - catchAll;
    check(catchAllRx > 0, 'sport auto: replies did not land on coil_ipip4');
    t0 = Date.now();
    await egresses.patch(EG_NAME, { spec: { fouSourcePortAuto: false } });
    await waitFor('encap sport 5555 again', () => sports(FOU_PORT), 30_000);
    lap('5.sportFixed', t0);
    const fixedLink = run('ip', ['-n', t.client.name, '-d', 'link', 'show', tun4]);

    // ---- Restart: coild goes away; an edit happens meanwhile; the new coild finds the pod by address and
    // its netns from the host veth alone, and catches the edit up.
    t0 = Date.now();
    await idle();
    await ec.stop();
    phase = 'while-stopped';
    await egresses.patch(EG_NAME, { spec: { destinations: [D1.v4, D1.v6, D2.v4, D2.v6] } });
    await sleep(1000);
    check(
      JSON.stringify(await destsOf()) === JSON.stringify(fams(D2).sort()),
      `a stopped coild changed the pod: ${JSON.stringify(await read())}`,
    );
    const tRestart = Date.now();
    const kernelPods = await new PodNetwork(t.node.ns, { podTableId: 116, podRulePrio: 2000, protocolId: 30, compatCalico: false }).list();
    check(
      kernelPods.length === 1 &&
        kernelPods[0]!.hostIndex === c0.index &&
        kernelPods[0]!.ipv4 === CLIENT.v4 &&
        kernelPods[0]!.ipv6 === CLIENT.v6,
      `PodNetwork.list(): ${JSON.stringify(kernelPods)}`,
    );
    const beforeRestart = natCalls.length;
    await idle();
    phase = 'restart';
    ec = newClient();
    await ec.start(kernelPods);
    await waitFor(
      'caught up after restart',
      async () => JSON.stringify(await destsOf()) === JSON.stringify([...fams(D1), ...fams(D2)].sort()),
      30_000,
    );
    lap('restart.catchUp', tRestart);
    const adopted = ec.list();
    check(adopted.length === 1 && adopted[0]!.podName === POD && adopted[0]!.netns !== undefined, `adopted: ${JSON.stringify(adopted)}`);
    // The adopted pod had no netns path: netnsOf() found one from c0's IFLA_LINK_NETNSID; it must be the client's.
    const foundNetns = adopted[0]!.netns!;
    const sameNs = (x: string, y: string): boolean => {
      const a = statSync(x),
        b = statSync(y);
      return a.dev === b.dev && a.ino === b.ino;
    };
    check(sameNs(foundNetns, t.client.ns.path), `netns found from the host veth ${foundNetns} is not the client's ${t.client.ns.path}`);
    const restartCalls = natCalls.slice(beforeRestart);
    check(
      restartCalls.length >= 1 && restartCalls.every((c) => c.netns === foundNetns),
      `restart calls: ${JSON.stringify(restartCalls.map((c) => c.netns))}`,
    );
    await through(`restart in ${INTERNET.v4}`, INTERNET.v4);
    lap('restart', t0);

    await idle();
    phase = 'deleted';
    // ---- 6. The Pod is deleted: the router removes its tunnels; coild's DEL forgets the pod.
    t0 = Date.now();
    await pods.delete(POD, { gracePeriodSeconds: 0 });
    await waitFor(
      'router tunnels removed',
      async () => (await link.find(t.router.ns, rtun4)) === undefined && (await link.find(t.router.ns, rtun6)) === undefined,
      30_000,
    );
    lap('6.podDeleted', t0);
    const routerTunnelsLeft = (await link.list(t.router.ns)).map((l) => l.name).filter((n) => /^fou[46]_/.test(n));
    check(routerTunnelsLeft.length === 0, `router tunnels left: ${routerTunnelsLeft.join()}`);
    ec.unregister(CONTAINER_ID, 'eth0');
    check(ec.list().length === 0, 'coild still lists the pod after DEL');

    daemon.kill('SIGTERM');
    const code = await exited;
    check(code === 0, `coil-egress exited ${code} on SIGTERM`);
    await ec.stop();
    timings.total = Date.now() - tAll;
    result('e2e', {
      dualStack,
      seen,
      catchAllRx,
      routerTunnelsLeft,
      autoLink,
      fixedLink,
      foundNetns,
      clientNetns: t.client.ns.path,
      natCalls: natCalls.map((c) => ({
        phase: c.phase,
        op: c.op,
        netns: c.netns,
        ms: c.ms,
        dests: c.cfg?.egresses.flatMap((e) => e.destinations),
        sportAuto: c.cfg?.egresses[0]?.fouSourcePortAuto,
      })),
      why: coildLog.filter((l) => l.includes('updating egress NAT')).map((l) => /"why":"([^"]+)"/.exec(l)?.[1]),
      timings,
    });
  } catch (err) {
    process.stdout.write(
      `--- coild (EgressClient) log\n${coildLog.join('\n')}\n--- NAT client calls\n${JSON.stringify(natCalls)}\n--- coil-egress log\n${daemonLog}\n---\ntimings ${JSON.stringify(timings)}\n`,
    );
    throw err;
  } finally {
    daemon.kill('SIGKILL');
    await ec.stop().catch(() => undefined);
  }
});
