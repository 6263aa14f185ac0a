/**
 * Coil's egress NAT over Foo-over-UDP, datapath half, with real traffic (see coil-egress-topo.ts
 * for the namespaces): the client side (nat-client.ts: reconcileNatClient / readNatClient /
 * removeNatClient) in the client pod, the router side (router.ts: reconcileRouter, snat.ts)
 * in the router pod, a kube-proxy-like DNAT for the Egress Service in the node.
 *
 * Every check compares what the internet host saw (the source address of a TCP connection)
 * and the tunnel devices' counters; each failure says what was expected and what was seen.
 */
import { link, openNetns, sameNetns } from '@cnikit/netlib';
import { readNatClient, reconcileNatClient, removeNatClient, type NatClientConfig } from '../../../packages/coil/src/egress/nat-client';
import { reconcileRouter, type RouterConfig } from '../../../packages/coil/src/egress/router';
import { ensureSnat, readNftTable, removeSnat, type NatBackend } from '../../../packages/coil/src/egress/snat';
import { fouLinkName } from '../../../packages/coil/src/egress/names';
import { check, linkStats, result, run, scenario } from './guest';
import {
  buildTopology,
  CLIENT,
  FOU_PORT,
  INTERNET,
  OTHER,
  PRIVATE,
  ROUTER,
  seenFrom,
  SERVICE,
  snapshot,
  type Topology,
} from './coil-egress-topo';

const TUN4 = fouLinkName(SERVICE.v4); // client -> Service (v4)
const TUN6 = fouLinkName(SERVICE.v6);
const RTUN4 = fouLinkName(CLIENT.v4); // router -> client
const RTUN6 = fouLinkName(CLIENT.v6);

function clientCfg(destinations: string[], sportAuto: boolean): NatClientConfig {
  return {
    fouPort: FOU_PORT,
    podIPv4: CLIENT.v4,
    podIPv6: CLIENT.v6,
    egresses: [
      { namespace: 'internet', name: 'egress', peerIPv4: SERVICE.v4, peerIPv6: SERVICE.v6, destinations, fouSourcePortAuto: sportAuto },
    ],
  };
}

const routerCfg = (sportAuto: boolean, clients = [CLIENT.v4, CLIENT.v6]): RouterConfig => ({
  fouPort: FOU_PORT,
  podIPv4: ROUTER.v4,
  podIPv6: ROUTER.v6,
  sportAuto,
  clients,
});
const snatCfg = { uplink: 'eth0', podIPv4: ROUTER.v4, podIPv6: ROUTER.v6 };

async function expectVia(t: Topology, dst: string, via: 'router' | 'client', what: string): Promise<void> {
  const fam = dst.includes(':') ? 'v6' : 'v4';
  const tun = fam === 'v4' ? TUN4 : TUN6;
  const before = linkStats(t.client.name, tun).tx;
  const peer = await seenFrom(t, dst);
  const tx = linkStats(t.client.name, tun).tx - before;
  const want = via === 'router' ? ROUTER[fam] : CLIENT[fam];
  check(peer === want, `${what}: ${dst} saw the client as ${peer}, expected the ${via}'s ${want}`);
  if (via === 'router') check(tx > 0, `${what}: ${tun} sent nothing for ${dst}`);
  else check(tx === 0, `${what}: ${tun} sent ${tx} packets for ${dst}, which is not an egress destination`);
}

scenario(async () => {
  const t = await buildTopology();
  const clientNs = t.client.ns.path;
  const clientMainBefore = run('ip', ['-n', t.client.name, 'route', 'show']) + run('ip', ['-n', t.client.name, '-6', 'route', 'show']);

  // Baseline, no egress: the internet host sees the client itself.
  check((await seenFrom(t, INTERNET.v4)) === CLIENT.v4, 'baseline v4 went elsewhere');

  // --- router pod: tunnels to the client (fixed sport), SNAT with iptables
  const r1 = await reconcileRouter(t.router.ns, routerCfg(false));
  check(
    r1.created.sort().join() === [RTUN4, RTUN6].sort().join() && r1.removed.length === 0 && r1.clients === 2,
    `router pass 1: ${JSON.stringify(r1)}`,
  );
  check((await ensureSnat(t.router.ns, 'iptables', snatCfg)) === true, 'ensureSnat(iptables) reported no change on a fresh pod');
  check((await ensureSnat(t.router.ns, 'iptables', snatCfg)) === false, 'ensureSnat(iptables) changed something the second time');
  result(
    'routerIptables',
    run('ip', ['netns', 'exec', t.router.name, 'iptables', '-t', 'nat', '-S', 'POSTROUTING']) +
      run('ip', ['netns', 'exec', t.router.name, 'ip6tables', '-t', 'nat', '-S', 'POSTROUTING']),
  );
  const r2 = await reconcileRouter(t.router.ns, routerCfg(false));
  check(r2.created.length === 0 && r2.removed.length === 0, `router pass 2 changed something: ${JSON.stringify(r2)}`);

  // --- client pod: one Egress for public and private destinations, fixed sport
  const dests = ['203.0.113.0/24', '172.20.0.0/16', '2001:db8:1::/64', 'fd20::/64'];
  const tc0 = Date.now();
  await reconcileNatClient(clientNs, clientCfg(dests, false));
  const clientFirstMs = Date.now() - tc0;
  result('clientRules', run('ip', ['-n', t.client.name, '-4', 'rule']) + run('ip', ['-n', t.client.name, '-6', 'rule']));
  result(
    'clientRoutes',
    run('ip', ['-n', t.client.name, 'route', 'show', 'table', '117']) +
      run('ip', ['-n', t.client.name, 'route', 'show', 'table', '118']) +
      run('ip', ['-n', t.client.name, '-6', 'route', 'show', 'table', '117']) +
      run('ip', ['-n', t.client.name, '-6', 'route', 'show', 'table', '118']),
  );
  result(
    'clientLinks',
    run('ip', ['-n', t.client.name, '-d', 'link', 'show', TUN4]) +
      run('ip', ['-n', t.client.name, '-d', 'link', 'show', TUN6]) +
      run('ip', ['-n', t.client.name, '-d', 'link', 'show', 'coil_ipip4']) +
      run('ip', ['-n', t.client.name, '-d', 'link', 'show', 'coil_ipip6']),
  );
  result('clientFou', run('ip', ['-n', t.client.name, 'fou', 'show']));
  const read1 = await readNatClient(clientNs);
  result('read1', read1);

  // Traffic: egress destinations (public in 118, private in 117) leave through the router,
  // the internet host sees the router's address; the others go straight out.
  const fixedRx4 = linkStats(t.client.name, TUN4).rx;
  await expectVia(t, INTERNET.v4, 'router', 'public v4');
  await expectVia(t, PRIVATE.v4, 'router', 'private v4 (table 117)');
  await expectVia(t, INTERNET.v6, 'router', 'public v6');
  await expectVia(t, PRIVATE.v6, 'router', 'private v6 (table 117)');
  await expectVia(t, OTHER.v4, 'client', 'not an egress destination v4');
  await expectVia(t, OTHER.v6, 'client', 'not an egress destination v6');
  // With a fixed source port the node's conntrack turns the replies' source back into the
  // ClusterIP: they are decapsulated by the fou4_ device itself.
  const fixedRx = { fou4: linkStats(t.client.name, TUN4).rx - fixedRx4, router: linkStats(t.router.name, RTUN4) };
  check(fixedRx.fou4 > 0, `fixed sport: replies did not come back on ${TUN4}: ${JSON.stringify(fixedRx)}`);
  result('fixedRx', fixedRx);

  // Reconcile twice = no change (same devices, rules, routes, ports).
  const snap1 = snapshot(t.client);
  const idx1 = (await link.get(t.client.ns, TUN4)).index;
  const tc1 = Date.now();
  await reconcileNatClient(clientNs, clientCfg(dests, false));
  const clientNoopMs = Date.now() - tc1;
  check(snapshot(t.client) === snap1, `second reconcile changed the client:\n${snap1}\n---\n${snapshot(t.client)}`);
  check((await link.get(t.client.ns, TUN4)).index === idx1, 'second reconcile recreated the tunnel');

  // --- edit the destinations: 203.0.113/24 and 2001:db8:1::/64 leave, 198.51.100/24 and 2001:db8:2::/64 come in
  const nsBefore = openNetns(clientNs);
  const dests2 = ['198.51.100.0/24', '172.20.0.0/16', '2001:db8:2::/64'];
  await reconcileNatClient(clientNs, clientCfg(dests2, false));
  const nsAfter = openNetns(clientNs);
  check(sameNetns(nsBefore, nsAfter), 'the client netns was replaced');
  nsBefore.close();
  nsAfter.close();
  check((await link.get(t.client.ns, TUN4)).index === idx1, 'a destination edit recreated the tunnel');
  await expectVia(t, OTHER.v4, 'router', 'added destination v4');
  await expectVia(t, OTHER.v6, 'router', 'added destination v6');
  await expectVia(t, INTERNET.v4, 'client', 'removed destination v4');
  await expectVia(t, INTERNET.v6, 'client', 'removed destination v6');
  await expectVia(t, PRIVATE.v4, 'router', 'kept destination v4');
  await expectVia(t, PRIVATE.v6, 'client', 'removed private destination v6');
  const read2 = await readNatClient(clientNs);
  result('read2', read2);

  // --- fouSourcePortAuto on (both ends, as one Egress drives both): the device's encap sport
  // becomes auto, replies come from the router pod's own address and land on the catch-all.
  // The devices are changed in place (same index: their routes never go away).
  const idx6 = (await link.get(t.client.ns, TUN6)).index;
  await reconcileNatClient(clientNs, clientCfg(dests2, true));
  check(
    (await link.get(t.client.ns, TUN4)).index === idx1 && (await link.get(t.client.ns, TUN6)).index === idx6,
    'the sport change recreated the client tunnels',
  );
  const r3 = await reconcileRouter(t.router.ns, routerCfg(true));
  check(r3.changed.sort().join() === [RTUN4, RTUN6].sort().join() && r3.created.length === 0, `router sport change: ${JSON.stringify(r3)}`);
  result('autoLink', run('ip', ['-n', t.client.name, '-d', 'link', 'show', TUN4]));
  const catchAll = linkStats(t.client.name, 'coil_ipip4').rx;
  const catchAll6 = linkStats(t.client.name, 'coil_ipip6').rx;
  await expectVia(t, OTHER.v4, 'router', 'sport auto v4');
  await expectVia(t, OTHER.v6, 'router', 'sport auto v6');
  const autoRx = {
    coil_ipip4: linkStats(t.client.name, 'coil_ipip4').rx - catchAll,
    coil_ipip6: linkStats(t.client.name, 'coil_ipip6').rx - catchAll6,
  };
  check(
    autoRx.coil_ipip4 > 0 && autoRx.coil_ipip6 > 0,
    `sport auto: replies did not land on the catch-all receivers: ${JSON.stringify(autoRx)}`,
  );
  result('autoRx', autoRx);
  const read3 = await readNatClient(clientNs);
  check(
    read3.peers.every((p) => p.sportAuto),
    `readNatClient after sport auto: ${JSON.stringify(read3)}`,
  );
  // ...and off again.
  await reconcileNatClient(clientNs, clientCfg(dests2, false));
  await reconcileRouter(t.router.ns, routerCfg(false));
  check((await link.get(t.client.ns, TUN4)).index === idx1, 'the sport change back recreated the client tunnel');
  result('fixedLink', run('ip', ['-n', t.client.name, '-d', 'link', 'show', TUN4]));
  check(
    (await readNatClient(clientNs)).peers.every((p) => !p.sportAuto),
    'readNatClient after sport fixed again',
  );
  await expectVia(t, OTHER.v4, 'router', 'sport fixed again v4');

  // --- NAT backends: without SNAT the internet host sees the client's address even through the
  // tunnel; nftables brings the router's address back.
  const backends: Record<string, string> = {};
  await removeSnat(t.router.ns, 'iptables', snatCfg);
  const noNat = await seenFrom(t, OTHER.v4).catch((e: Error) => `failed: ${e.message}`);
  check(noNat !== ROUTER.v4, `without SNAT the internet host still saw the router (${noNat})`);
  backends.none = noNat;
  for (const b of ['nftables', 'iptables'] as NatBackend[]) {
    check((await ensureSnat(t.router.ns, b, snatCfg)) === true, `ensureSnat(${b}) reported no change`);
    check((await ensureSnat(t.router.ns, b, snatCfg)) === false, `ensureSnat(${b}) not idempotent`);
    backends[b] = await seenFrom(t, OTHER.v4);
    const v6 = await seenFrom(t, OTHER.v6);
    check(backends[b] === ROUTER.v4 && v6 === ROUTER.v6, `${b}: internet saw ${backends[b]} / ${v6}, expected ${ROUTER.v4} / ${ROUTER.v6}`);
    if (b === 'nftables') result('nftTable', run('ip', ['netns', 'exec', t.router.name, 'nft', 'list', 'table', 'inet', 'coil-egress']));
    await removeSnat(t.router.ns, b, snatCfg);
    if (b === 'nftables') check((await readNftTable(t.router.ns)) === undefined, 'removeSnat(nftables) left the table');
  }
  result('backends', backends);
  await ensureSnat(t.router.ns, 'iptables', snatCfg);

  // --- a client going away: the router removes its tunnel (v4 only here), the v4 path stops
  const r4 = await reconcileRouter(t.router.ns, routerCfg(false, [CLIENT.v6]));
  check(r4.removed.join() === RTUN4 && r4.created.length === 0, `router after the v4 client left: ${JSON.stringify(r4)}`);
  check((await link.find(t.router.ns, RTUN4)) === undefined, `${RTUN4} still in the router`);
  check(
    !run('ip', ['-n', t.router.name, 'route', 'show', 'table', '118']).includes(CLIENT.v4),
    'route to the gone client left in table 118',
  );
  // The router's catch-all still decapsulates what the client sends, but nothing is tunnelled
  // back any more: replies to the client arrive (if at all) without FoU.
  const rxBack = (): number => linkStats(t.client.name, TUN4).rx + linkStats(t.client.name, 'coil_ipip4').rx;
  const rxBefore = rxBack();
  const gone = await seenFrom(t, OTHER.v4, 3000).catch((e: Error) => `failed: ${e.message}`);
  const rxDelta = rxBack() - rxBefore;
  check(rxDelta === 0, `${rxDelta} packets still came back through the tunnel after the router removed ${RTUN4}`);
  await expectVia(t, OTHER.v6, 'router', 'v6 client still served');
  result('clientGone', { removed: r4.removed, v4: gone, rxDelta });

  // --- removeNatClient leaves nothing egress-related and keeps the pod network
  await removeNatClient(clientNs);
  const left = snapshot(t.client);
  check(
    !/fou[46]_|coil_ipip|lookup 11[78]|^\d+:\s.*(1800|1900|2000|2001|2002|2100):/m.test(left) && !/port 5555/.test(left),
    `removeNatClient left:\n${left}`,
  );
  for (const p of ['1800', '1900', '2000', '2001', '2002', '2100']) check(!new RegExp(`^${p}:`, 'm').test(left), `rule ${p} left`);
  const clientMainAfter = run('ip', ['-n', t.client.name, 'route', 'show']) + run('ip', ['-n', t.client.name, '-6', 'route', 'show']);
  check(clientMainAfter === clientMainBefore, `the pod's own routes changed:\n${clientMainBefore}\n---\n${clientMainAfter}`);
  check((await seenFrom(t, OTHER.v4)) === CLIENT.v4, 'after removeNatClient traffic still not direct');
  await removeNatClient(clientNs); // idempotent
  await removeNatClient('/var/run/netns/no-such-pod'); // absent netns
  check((await readNatClient(clientNs)).peers.length === 0, 'readNatClient after remove');
  // An empty Egress list is a removal too (after setting it up again).
  await reconcileNatClient(clientNs, clientCfg(dests2, false));
  await reconcileNatClient(clientNs, { fouPort: FOU_PORT, podIPv4: CLIENT.v4, podIPv6: CLIENT.v6, egresses: [] });
  check(snapshot(t.client) === left, 'reconcile with no egress is not the same as removeNatClient');
  result('removed', left);

  // Scale and cost of the router's pass (guest under TCG emulation: slow, but relative): 100
  // clients appear, a pass with nothing to do, all leave.
  const many = Array.from({ length: 100 }, (_, i) => `10.102.${i >> 8}.${(i & 255) + 1}`);
  let t0 = Date.now();
  const up = await reconcileRouter(t.router.ns, routerCfg(true, many));
  const router100Ms = Date.now() - t0;
  t0 = Date.now();
  const noop = await reconcileRouter(t.router.ns, routerCfg(true, many));
  const routerNoopMs = Date.now() - t0;
  t0 = Date.now();
  const down = await reconcileRouter(t.router.ns, routerCfg(true, []));
  const routerDownMs = Date.now() - t0;
  check(
    up.created.length === 100 && noop.created.length + noop.changed.length + noop.removed.length === 0 && down.removed.length === 100,
    `100 clients: ${up.created.length} created, no-op ${JSON.stringify({ ...noop, created: noop.created.length })}, ${down.removed.length} removed`,
  );
  check(!/fou[46]_/.test(run('ip', ['-n', t.router.name, 'link', 'show'])), 'router tunnels left after all clients left');
  result('timings', { clientFirstMs, clientNoopMs, router100Ms, routerNoopMs, routerDownMs });
});
