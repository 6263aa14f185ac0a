/**
 * dummy links, and IPv6-in-IPv6 over FoU (ip6tnl + fou6), the IPv6 half of Coil's egress,
 * built with netlib: "client" and "router" on an IPv6 veth underlay (fd00:100::1/::2), FoU
 * port 5556 for IP protocol 41 on both sides (family 6), ip6tnl devices with `encap fou
 * encap-sport auto`, a TCP exchange from fd00:10::1 to fd00:20::1 (a dummy in the router).
 */
import { addr, link, route } from '@cnikit/netlib';
import { fou, tunnel } from './netlib-next';
import { ipJson, newNs } from '@cnikit/netlib-testing';
import { check, linkStats, result, run, scenario, tcpExchange } from './guest';

const PORT = 5556;

scenario(async () => {
  // --- dummy
  const a = newNs('kld');
  const b = newNs('kld');
  const d0 = await tunnel.addDummy(a.ns, { name: 'dummy0', mtu: 9000, mac: '02:00:00:00:00:01' });
  check(d0.kind === 'dummy' && d0.mtu === 9000 && d0.mac === '02:00:00:00:00:01', `dummy0 ${JSON.stringify(d0)}`);
  // Created in `a`'s request, placed straight into `b`.
  const d1 = await tunnel.addDummy(a.ns, { name: 'dummy1', targetNs: b.ns });
  check((await link.find(a.ns, 'dummy1')) === undefined && d1.kind === 'dummy', 'dummy1 not created in its target namespace');
  await addr.add(b.ns, d1.index, '172.31.0.1/32');
  await link.setUp(b.ns, d1.index);
  const j = ipJson<Array<{ ifname: string; linkinfo: { info_kind: string } }>>(b.name, '-d link show dummy1');
  check(j[0]?.linkinfo.info_kind === 'dummy', `ip -d -j: ${JSON.stringify(j)}`);
  run('ip', ['netns', 'exec', b.name, 'busybox', 'ping', '-c', '1', '-W', '2', '172.31.0.1']);
  await link.del(a.ns, 'dummy0');
  check((await link.find(a.ns, 'dummy0')) === undefined, 'dummy0 still there after del');
  result('dummy', run('ip', ['-n', b.name, '-d', 'link', 'show', 'dummy1']));

  // --- ip6tnl over FoU (IPv6 underlay, IPv6 inside)
  const client = newNs('klc6');
  const router = newNs('klr6');
  await link.addVeth(client.ns, { name: 'eth0', peerName: 'eth0', peerNs: router.ns });
  for (const [t, ip] of [
    [client, 'fd00:100::1/64'],
    [router, 'fd00:100::2/64'],
  ] as const) {
    await addr.add(t.ns, (await link.get(t.ns, 'eth0')).index, ip, { noDad: true });
    await link.setUp(t.ns, 'eth0');
  }
  for (const t of [client, router]) await fou.add(t.ns, { port: PORT, family: 6, ipproto: 41 });
  const ports = await fou.list(router.ns);
  check(ports.length === 1 && ports[0]!.family === 6 && ports[0]!.ipproto === 41, `fou.list: ${JSON.stringify(ports)}`);

  const encap = { type: 'fou' as const, dport: PORT };
  const cTun = await tunnel.addIp6tnl(client.ns, {
    name: 'fou6_router',
    local: 'fd00:100::1',
    remote: 'fd00:100::2',
    proto: 'ip6ip6',
    encap,
  });
  const rTun = await tunnel.addIp6tnl(router.ns, {
    name: 'fou6_client',
    local: 'fd00:100::2',
    remote: 'fd00:100::1',
    proto: 'ip6ip6',
    encap,
  });
  const det = await tunnel.details(client.ns, cTun.index);
  check(
    det.kind === 'ip6tnl' &&
      det.tunnel?.proto === 'ip6ip6' &&
      det.tunnel.encap?.type === 'fou' &&
      det.tunnel.encap.dport === PORT &&
      det.tunnel.encap.sport === 0,
    `details ${JSON.stringify(det)}`,
  );
  await addr.add(client.ns, cTun.index, 'fd00:10::1/128', { noDad: true });
  await link.setUp(client.ns, cTun.index);
  await link.setUp(router.ns, rTun.index);
  const inet = await tunnel.addDummy(router.ns, { name: 'inet0' });
  await addr.add(router.ns, inet.index, 'fd00:20::1/64', { noDad: true });
  await link.setUp(router.ns, inet.index);
  await route.add(client.ns, { dst: 'fd00:20::/64', oif: cTun.index, src: 'fd00:10::1' });
  await route.add(router.ns, { dst: 'fd00:10::1/128', oif: rTun.index });

  const ex = await tcpExchange({ serverNs: router.name, clientNs: client.name, host: 'fd00:20::1', port: 8080, msg: 'over-fou6' });
  check(ex.got === 'over-fou6' && ex.peer === 'fd00:10::1', `exchange ${JSON.stringify(ex)}`);
  const cs = linkStats(client.name, 'fou6_router');
  check(cs.tx > 0 && cs.rx > 0, `tunnel counters ${JSON.stringify(cs)}`);
  result('exchange6', { ...ex, client: cs });
  result('ipDetails6', run('ip', ['-n', client.name, '-d', 'link', 'show', 'fou6_router']));
  result('fouShow6', run('ip', ['-n', router.name, 'fou', 'show']));
});
