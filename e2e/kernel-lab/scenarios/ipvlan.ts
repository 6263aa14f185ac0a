/**
 * ipvlan with netlib (tunnel.addIpvlan), the shape of Terway's ENI multi-IP ipvlan datapath:
 * a "node" namespace holds the master ("eni0", a dummy standing in for the ENI); two "pods"
 * each get an ipvlan L2 slave created directly in their namespace. Checks a TCP exchange
 * between the pods (slaves of one master talk through ipvlan itself), the modes l2/l3/l3s as
 * the kernel reports them, the host-side slave that gives the node a path to its pods
 * (Terway's `ipvl_<idx>`), and what iproute2 prints.
 */
import { addr, isExistsError, link, route } from '@cnikit/netlib';
import { tunnel } from './netlib-next';
import { ipJson, newNs } from '@cnikit/netlib-testing';
import { check, result, run, scenario, tcpExchange } from './guest';

scenario(async () => {
  const node = newNs('kln');
  const pod1 = newNs('klp1');
  const pod2 = newNs('klp2');
  const eni = await tunnel.addDummy(node.ns, { name: 'eni0', mtu: 1500 });
  await link.setUp(node.ns, eni.index);

  const pods = [
    { t: pod1, ip: '10.0.1.11' },
    { t: pod2, ip: '10.0.1.12' },
  ];
  for (const p of pods) {
    const l = await tunnel.addIpvlan(node.ns, { name: 'eth0', parentIndex: eni.index, mode: 'l2', targetNs: p.t.ns });
    check(l.kind === 'ipvlan', `kind ${l.kind}`);
    check(l.mac === eni.mac, `slave MAC ${l.mac} differs from the master's ${eni.mac}`);
    await addr.add(p.t.ns, l.index, `${p.ip}/24`);
    await link.setUp(p.t.ns, l.index);
    const d = await tunnel.details(p.t.ns, 'eth0');
    check(d.ipvlan?.mode === 'l2' && d.ipvlan.flag === 'bridge', `details ${JSON.stringify(d.ipvlan)}`);
  }
  // Not visible in the node namespace: created directly in the pods'.
  check((await link.find(node.ns, 'eth0')) === undefined, 'a slave was left in the node namespace');

  const ex = await tcpExchange({ serverNs: pod2.name, clientNs: pod1.name, host: '10.0.1.12', port: 7000, msg: 'pod-to-pod' });
  check(ex.got === 'pod-to-pod' && ex.peer === '10.0.1.11', `exchange ${JSON.stringify(ex)}`);
  result('podToPod', ex);

  // Node -> pod through a host-side slave (Terway: ipvl_<idx> with a /32 route per pod).
  const host = await tunnel.addIpvlan(node.ns, { name: `ipvl_${eni.index}`, parentIndex: eni.index, mode: 'l2' });
  await addr.add(node.ns, host.index, '10.0.1.1/32');
  await link.setUp(node.ns, host.index);
  await route.add(node.ns, { dst: '10.0.1.12/32', oif: host.index });
  await route.add(pod2.ns, { dst: '10.0.1.1/32', oif: (await link.get(pod2.ns, 'eth0')).index });
  const ex2 = await tcpExchange({ serverNs: pod2.name, clientNs: node.name, host: '10.0.1.12', port: 7001, msg: 'node-to-pod' });
  check(ex2.peer === '10.0.1.1', `node -> pod exchange ${JSON.stringify(ex2)}`);
  result('nodeToPod', ex2);

  // Modes and flags as the kernel stores them. They are the master's (port-wide), so each
  // mode gets a master of its own; on eni0 they would switch the pods' slaves too.
  for (const [mode, flag] of [
    ['l3', 'private'],
    ['l3s', 'vepa'],
  ] as const) {
    const master = await tunnel.addDummy(node.ns, { name: `eni_${mode}` });
    const l = await tunnel.addIpvlan(node.ns, { name: `ipv_${mode}`, parentIndex: master.index, mode, flag });
    const d = await tunnel.details(node.ns, l.index);
    check(d.ipvlan?.mode === mode && d.ipvlan.flag === flag, `${mode}/${flag}: ${JSON.stringify(d.ipvlan)}`);
    const j = ipJson<Array<{ linkinfo: { info_kind: string; info_data: { mode: string } } }>>(node.name, `-d link show ipv_${mode}`);
    check(j[0]?.linkinfo.info_kind === 'ipvlan' && j[0].linkinfo.info_data.mode === mode, `ip -d -j: ${JSON.stringify(j[0]?.linkinfo)}`);
  }
  const dup = await tunnel.addIpvlan(node.ns, { name: 'ipv_l3', parentIndex: eni.index }).catch((e: unknown) => e);
  check(isExistsError(dup), `duplicate name: ${String(dup)}`);
  const still = await tunnel.details(pod1.ns, 'eth0');
  check(still.ipvlan?.mode === 'l2', `the pods' slaves changed mode: ${JSON.stringify(still.ipvlan)}`);
  result('ipDetails', run('ip', ['-n', pod1.name, '-d', 'link', 'show', 'eth0']));
  result('ipDetailsL3s', run('ip', ['-n', node.name, '-d', 'link', 'show', 'ipv_l3s']));
});
