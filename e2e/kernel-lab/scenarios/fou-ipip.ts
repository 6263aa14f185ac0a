/**
 * IPIP over Foo-over-UDP between two namespaces, built with netlib only (tunnel.addIpip,
 * fou.add), the shape of Coil's egress: a "client" and a "router" joined by a veth underlay
 * (192.168.100.1/.2); each side listens on FoU port 5555 for IP protocol 4 and has an ipip
 * device to the other with `encap fou encap-sport auto encap-dport 5555`. The router holds the
 * "internet" address 10.20.0.1 on a dummy; the client reaches it from 10.10.0.1 through the tunnel.
 *
 * Checks: a TCP exchange works and the server sees the client's inner address; the tunnel
 * devices and the router's UDP counters moved (the packets really were UDP-encapsulated);
 * with the router's FoU port closed the same exchange fails; the kernel's view (ip -d link,
 * ip fou show) matches what netlib reports. Prints the iproute2 views as results.
 */
import { addr, isExistsError, isNotFoundError, link, route } from '@cnikit/netlib';
import { fou, tunnel } from './netlib-next';
import { newNs } from '@cnikit/netlib-testing';
import { check, linkStats, result, run, scenario, tcpExchange, udpInDatagrams } from './guest';

const PORT = 5555;

scenario(async () => {
  const client = newNs('klc');
  const router = newNs('klr');
  await link.addVeth(client.ns, { name: 'eth0', peerName: 'eth0', peerNs: router.ns });
  await addr.add(client.ns, (await link.get(client.ns, 'eth0')).index, '192.168.100.1/24');
  await addr.add(router.ns, (await link.get(router.ns, 'eth0')).index, '192.168.100.2/24');
  await link.setUp(client.ns, 'eth0');
  await link.setUp(router.ns, 'eth0');

  // FoU receive ports on both sides (replies come back through the router's tunnel).
  for (const t of [client, router]) await fou.add(t.ns, { port: PORT, family: 4, ipproto: 4 });
  const ports = await fou.list(router.ns);
  check(
    ports.length === 1 && ports[0]!.port === PORT && ports[0]!.ipproto === 4 && ports[0]!.type === 'direct',
    `fou.list: ${JSON.stringify(ports)}`,
  );
  check(JSON.stringify(await fou.find(router.ns, { port: PORT })) === JSON.stringify(ports[0]), 'fou.find disagrees with fou.list');
  check((await fou.find(router.ns, { port: PORT + 1 })) === undefined, 'fou.find of a closed port');

  const encap = { type: 'fou' as const, dport: PORT, sport: 0 };
  const cTun = await tunnel.addIpip(client.ns, { name: 'fou4_router', local: '192.168.100.1', remote: '192.168.100.2', encap });
  const rTun = await tunnel.addIpip(router.ns, { name: 'fou4_client', local: '192.168.100.2', remote: '192.168.100.1', encap });
  check(cTun.kind === 'ipip' && rTun.kind === 'ipip', `kinds ${cTun.kind} ${rTun.kind}`);
  const d = await tunnel.details(client.ns, 'fou4_router');
  check(
    d.tunnel?.encap?.type === 'fou' &&
      d.tunnel.encap.dport === PORT &&
      d.tunnel.encap.sport === 0 &&
      d.tunnel.remote === '192.168.100.2' &&
      d.tunnel.local === '192.168.100.1',
    `tunnel.details: ${JSON.stringify(d.tunnel)}`,
  );

  // Inner addressing: client 10.10.0.1 on its tunnel, "internet" 10.20.0.1 on a dummy in the router.
  await addr.add(client.ns, cTun.index, '10.10.0.1/32');
  await link.setUp(client.ns, cTun.index);
  await link.setUp(router.ns, rTun.index);
  const inet = await tunnel.addDummy(router.ns, { name: 'inet0' });
  await addr.add(router.ns, inet.index, '10.20.0.1/24');
  await link.setUp(router.ns, inet.index);
  await route.add(client.ns, { dst: '10.20.0.0/24', oif: cTun.index, src: '10.10.0.1' });
  await route.add(router.ns, { dst: '10.10.0.1/32', oif: rTun.index });

  const udpBefore = udpInDatagrams(router.name);
  const ex = await tcpExchange({ serverNs: router.name, clientNs: client.name, host: '10.20.0.1', port: 8080, msg: 'over-fou' });
  check(ex.got === 'over-fou', `server got ${JSON.stringify(ex.got)}`);
  check(ex.peer === '10.10.0.1', `server saw the client as ${ex.peer}, expected its inner address 10.10.0.1`);
  const udpDelta = udpInDatagrams(router.name) - udpBefore;
  const cs = linkStats(client.name, 'fou4_router');
  const rs = linkStats(router.name, 'fou4_client');
  check(cs.tx > 0 && cs.rx > 0 && rs.rx > 0 && rs.tx > 0, `tunnel counters client ${JSON.stringify(cs)} router ${JSON.stringify(rs)}`);
  check(udpDelta >= rs.rx, `router UDP InDatagrams grew by ${udpDelta}, fewer than the ${rs.rx} packets its tunnel received`);
  result('exchange', { ...ex, udpDelta, client: cs, router: rs });

  // iproute2's view of what netlib built.
  result('ipDetails', run('ip', ['-n', client.name, '-d', 'link', 'show', 'fou4_router']));
  result('fouShow', run('ip', ['-n', router.name, 'fou', 'show']));

  // Errors: duplicate port and link names are EEXIST.
  const dup = await fou.add(router.ns, { port: PORT, ipproto: 4 }).catch((e: unknown) => e);
  check(isExistsError(dup), `second fou.add: ${String(dup)}`);
  const dupLink = await tunnel.addIpip(router.ns, { name: 'fou4_client', remote: '192.168.100.1', encap }).catch((e: unknown) => e);
  check(isExistsError(dupLink), `second addIpip: ${String(dupLink)}`);

  // Without the router's FoU port the encapsulated SYN is refused (ICMP port unreachable): the
  // exchange above really went through UDP port 5555.
  await fou.del(router.ns, { port: PORT });
  check((await fou.list(router.ns)).length === 0, 'fou.del left a port');
  const blocked = await tcpExchange({ serverNs: router.name, clientNs: client.name, host: '10.20.0.1', port: 8081, timeoutMs: 3000 }).catch(
    (e: unknown) => e,
  );
  check(blocked instanceof Error, `exchange without the FoU port succeeded: ${JSON.stringify(blocked)}`);
  const again = await fou.del(router.ns, { port: PORT }).catch((e: unknown) => e);
  check(isNotFoundError(again), `fou.del of a closed port: ${String(again)}`);
  result('delAgain', String(again));

  // A fixed source port (encap-sport 5555, Coil without fouSourcePortAuto) reads back as such.
  const fixed = await tunnel.addIpip(client.ns, {
    name: 'fou4_fixed',
    remote: '192.168.100.3',
    encap: { type: 'fou', dport: PORT, sport: PORT },
  });
  check((await tunnel.details(client.ns, fixed.index)).tunnel?.encap?.sport === PORT, 'fixed encap sport');
  result('ipDetailsFixed', run('ip', ['-n', client.name, '-d', 'link', 'show', 'fou4_fixed']));

  // Flow-based catch-all receiver (Coil's coil_ipip4): `external`.
  await tunnel.addIpip(router.ns, { name: 'coil_ipip4', external: true });
  check((await tunnel.details(router.ns, 'coil_ipip4')).tunnel?.external === true, 'external ipip');
  result('ipDetailsExternal', run('ip', ['-n', router.name, '-d', 'link', 'show', 'coil_ipip4']));
});
