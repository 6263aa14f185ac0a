/**
 * Terway's ENI multi-IP ipvlan L2 datapath (packages/terway/src/datapath/eniip-ipvlan.ts),
 * set up by the package's own code in a kernel that has ipvlan:
 *
 *   "node" ns: eni1 (an ENI: a veth into the "VPC" ns, MAC 00:16:3e:00:00:01), node IP
 *              10.6.0.1/32 and a "Service" 10.96.0.10/32 on lo
 *   "VPC"  ns: vpc1 192.168.1.253/24 (vSwitch gateway), 10.9.9.9/32 on lo (a VPC peer)
 *   pods:      eth0 = ipvlan slaves of eni1, 192.168.1.10/24 and 192.168.1.11/24
 *
 * Checks with TCP: pod <-> pod (same ENI), node -> pod (through ipvl_<idx>), pod -> "Service"
 * (redirected from the ENI's egress into ipvl_<idx>), pod -> VPC (through the ENI); CHECK;
 * a repeated ADD; DEL twice; the other pod still works after one is gone. Then the terway CNI
 * handler (in-process, `eniip_virtual_type: ipvlan`) -> gRPC -> terwayd (TerwayDaemon over a
 * fixed address source) wires a third pod: ADD, CHECK, traffic, DEL twice. Then the last pod's
 * DEL removes the ENI's host slave and its filters; and the kernel-driven GC and repair of
 * terwayd's ipvlan mode: two pods through the CNI handler, one sandbox destroyed without DEL,
 * a stale host route, a lost one; GC frees the dead pod's lease after its grace period, repair
 * removes/re-adds routes, and removes the host slave once no live pod uses the ENI. Last, terwayd
 * itself (startTerwayd with `eniip_virtual_type: ipvlan`, the fake OpenAPI served in the guest):
 * a pod through the CNI handler, its sandbox destroyed without DEL, gcOnce frees it and removes the slave.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { link, runPlugin, type PluginHandlers } from '@cnikit/netlib';
import { newNs, sh, useHostNetns } from '@cnikit/netlib-testing';
import * as plugin from '../../../packages/terway/src/cni/plugin';
import { TerwayDaemon, type AddressSource } from '../../../packages/terway/src/daemon/daemon';
import { TerwayServer } from '../../../packages/terway/src/daemon/server';
import { LeaseStore } from '../../../packages/terway/src/daemon/store';
import type { IpLease } from '../../../packages/terway/src/pool';
import {
  checkIpvlanPod,
  hostSlaveName,
  repairIpvlan,
  setupIpvlanPod,
  teardownIpvlanPod,
} from '../../../packages/terway/src/datapath/eniip-ipvlan';
import { ipvlanLeaseGc } from '../../../packages/terway/src/daemon/ipvlan-gc';
import { FakeOpenApi } from '@cnikit/aliyun-emulator';
import { FakeClock } from '@cnikit/terway-testing';
import { startTerwayd } from '../../../packages/terway/src/daemon/bootstrap';
import { check, result, run, scenario, tcpExchange } from './guest';

const MAC = '00:16:3e:00:00:01';

scenario(async () => {
  const node = newNs('ktn');
  const vpc = newNs('ktx');
  const p1 = newNs('ktp1');
  const p2 = newNs('ktp2');
  sh(node.ns, `ip link add eni1 address ${MAC} type veth peer name vpc1 netns ${vpc.name}`);
  sh(node.ns, 'ip addr add 10.6.0.1/32 dev lo && ip addr add 10.96.0.10/32 dev lo');
  sh(vpc.ns, 'ip addr add 192.168.1.253/24 dev vpc1 && ip link set vpc1 up && ip addr add 10.9.9.9/32 dev lo');
  // The VPC delivers the pod IPs to the ENI.
  for (const ip of ['192.168.1.10', '192.168.1.11']) sh(vpc.ns, `ip neigh replace ${ip} lladdr ${MAC} dev vpc1 nud permanent`);

  const pod = (name: string, ip: string) => ({
    podNamespace: 'default',
    podName: name,
    ifName: 'eth0',
    ip,
    eni: { mac: MAC, gateway: '192.168.1.253', prefix: 24 },
    nodeIp: '10.6.0.1',
    serviceCidrs: ['10.96.0.0/12'],
  });
  const a = await setupIpvlanPod(node.ns, p1.ns, pod('web-0', '192.168.1.10'));
  await setupIpvlanPod(node.ns, p2.ns, pod('web-1', '192.168.1.11'));
  const eniIndex = (await link.get(node.ns, 'eni1')).index;
  check(a.hostSlave === hostSlaveName(eniIndex) && a.hostSlave === `ipvl_${eniIndex}`, `host slave ${a.hostSlave}, ENI index ${eniIndex}`);
  result('hostSlave', a.hostSlave === `ipvl_${eniIndex}`);
  result('podLink', run('ip', ['-n', p1.name, '-d', 'link', 'show', 'eth0']));
  result('hostSlaveLink', run('ip', ['-n', node.name, '-d', 'link', 'show', a.hostSlave]));
  result('podRoutes', run('ip', ['-n', p1.name, 'route', 'show']));
  result('hostRoute', run('ip', ['-n', node.name, 'route', 'show', '192.168.1.10/32']));
  result('filters', run('ip', ['netns', 'exec', node.name, 'tc', 'filter', 'show', 'dev', 'eni1', 'egress']));

  const podToPod = await tcpExchange({ serverNs: p2.name, clientNs: p1.name, host: '192.168.1.11', port: 7100, msg: 'pod-to-pod' });
  check(podToPod.peer === '192.168.1.10' && podToPod.got === 'pod-to-pod', `pod -> pod ${JSON.stringify(podToPod)}`);
  result('podToPod', podToPod);
  const nodeToPod = await tcpExchange({ serverNs: p1.name, clientNs: node.name, host: '192.168.1.10', port: 7101, msg: 'node-to-pod' });
  check(nodeToPod.peer === '10.6.0.1', `node -> pod ${JSON.stringify(nodeToPod)}`);
  result('nodeToPod', nodeToPod);
  const toService = await tcpExchange({ serverNs: node.name, clientNs: p1.name, host: '10.96.0.10', port: 7102, msg: 'pod-to-service' });
  check(toService.peer === '192.168.1.10' && toService.got === 'pod-to-service', `pod -> Service ${JSON.stringify(toService)}`);
  result('podToService', toService);
  const toVpc = await tcpExchange({ serverNs: vpc.name, clientNs: p2.name, host: '10.9.9.9', port: 7103, msg: 'pod-to-vpc' });
  check(toVpc.peer === '192.168.1.11', `pod -> VPC ${JSON.stringify(toVpc)}`);
  result('podToVpc', toVpc);

  const ok = await checkIpvlanPod(node.ns, p1.ns, { ifName: 'eth0', ip: '192.168.1.10', eniMac: MAC });
  check(ok.length === 0, `CHECK: ${ok.join('; ')}`);
  // A repeated ADD ends the same: one filter, one route, traffic flows.
  await setupIpvlanPod(node.ns, p1.ns, pod('web-0', '192.168.1.10'));
  const again = await tcpExchange({ serverNs: node.name, clientNs: p1.name, host: '10.96.0.10', port: 7104, msg: 'again' });
  check(again.peer === '192.168.1.10', `after a repeated ADD ${JSON.stringify(again)}`);
  const nFilters = (run('ip', ['netns', 'exec', node.name, 'tc', 'filter', 'show', 'dev', 'eni1', 'egress']).match(/mirred/g) ?? []).length;
  check(nFilters === 1, `${nFilters} redirect filters after a repeated ADD`);

  sh(node.ns, `ip route del 192.168.1.10/32 dev ${a.hostSlave}`);
  const broken = await checkIpvlanPod(node.ns, p1.ns, { ifName: 'eth0', ip: '192.168.1.10', eniMac: MAC });
  check(
    broken.length === 1 && broken[0] === 'host route 192.168.1.10/32 dev ipvl_* is missing',
    `CHECK after removing the route: ${broken.join('; ')}`,
  );
  result('checkBroken', broken);

  await teardownIpvlanPod(node.ns, p1.ns, { ifName: 'eth0', ip: '192.168.1.10' });
  await teardownIpvlanPod(node.ns, p1.ns, { ifName: 'eth0', ip: '192.168.1.10' });
  check((await link.find(p1.ns, 'eth0')) === undefined, 'pod slave left after DEL');
  const left = await tcpExchange({ serverNs: node.name, clientNs: p2.name, host: '10.96.0.10', port: 7105, msg: 'still' });
  check(left.peer === '192.168.1.11', `the other pod after DEL ${JSON.stringify(left)}`);
  result('delTwice', true);

  // The CNI binary's ipvlan path through terwayd over gRPC.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'terway-lab-'));
  const leases = new Map<string, IpLease>();
  const source: AddressSource = {
    allocate: async (key) => {
      const l = leases.get(key) ?? {
        ip: '192.168.1.12',
        eniId: 'eni-1',
        mac: MAC,
        vswitchId: 'vsw-1',
        vswitchCidr: '192.168.1.0/24',
        gateway: '192.168.1.253',
      };
      leases.set(key, l);
      return l;
    },
    release: (key) => leases.delete(key),
    leaseOf: (key) => leases.get(key),
    leases: () => [...leases].map(([key, lease]) => ({ key, lease })),
    gc: () => [],
  };
  const daemon = new TerwayDaemon({ pool: source, store: new LeaseStore(path.join(dir, 'pod.json')), serviceCidr: '10.96.0.0/12' });
  const socket = path.join(dir, 'eni.socket');
  const server = new TerwayServer(daemon, socket);
  await server.start();
  sh(vpc.ns, `ip neigh replace 192.168.1.12 lladdr ${MAC} dev vpc1 nud permanent`);
  const p3 = newNs('ktp3');
  const cni = async (
    command: string,
    extra: Record<string, unknown> = {},
    sandbox = { id: 'ctr-db-0', ns: p3 },
  ): Promise<{ code: number; out: string }> => {
    const conf = {
      cniVersion: '1.0.0',
      name: 'terway',
      type: 'terway',
      socket,
      eniip_virtual_type: 'ipvlan',
      host_ip: '10.6.0.1',
      ...extra,
    };
    const env = {
      CNI_COMMAND: command,
      CNI_CONTAINERID: sandbox.id,
      CNI_NETNS: sandbox.ns.ns.path,
      CNI_IFNAME: 'eth0',
      CNI_PATH: '/opt/cni/bin',
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=db-0;K8S_POD_INFRA_CONTAINER_ID=${sandbox.id}`,
    };
    const r = await useHostNetns(node.ns, () =>
      runPlugin(plugin as unknown as PluginHandlers, { about: 'terway lab' }, { env, stdin: JSON.stringify(conf) }),
    );
    return { code: r.exitCode, out: r.stdout };
  };
  try {
    const add = await cni('ADD');
    check(add.code === 0, `CNI ADD: ${add.out}`);
    const res = JSON.parse(add.out) as { ips: { address: string; gateway: string }[] };
    check(res.ips[0]?.address === '192.168.1.12/24' && res.ips[0].gateway === '192.168.1.253', `ADD result ${add.out}`);
    result('cniAdd', res.ips);
    const chk = await cni('CHECK', { prevResult: res });
    check(chk.code === 0, `CNI CHECK: ${chk.out}`);
    const svc = await tcpExchange({ serverNs: node.name, clientNs: p3.name, host: '10.96.0.10', port: 7106, msg: 'cni-pod-to-service' });
    check(svc.peer === '192.168.1.12', `CNI pod -> Service ${JSON.stringify(svc)}`);
    const pp = await tcpExchange({ serverNs: p2.name, clientNs: p3.name, host: '192.168.1.11', port: 7107, msg: 'cni-pod-to-pod' });
    check(pp.peer === '192.168.1.12', `CNI pod -> pod ${JSON.stringify(pp)}`);
    const vp = await tcpExchange({ serverNs: vpc.name, clientNs: p3.name, host: '10.9.9.9', port: 7108, msg: 'cni-pod-to-vpc' });
    check(vp.peer === '192.168.1.12', `CNI pod -> VPC ${JSON.stringify(vp)}`);
    result('cniTraffic', true);
    // kubelet re-creates the sandbox: the old one's interface is gone, the new one (same pod, same IP)
    // is wired, then the old sandbox's DEL arrives. It must leave the host route of the new one.
    const p3b = newNs('ktp3b');
    sh(p3.ns, 'ip link del eth0');
    const addB = await cni('ADD', {}, { id: 'ctr-db-0b', ns: p3b });
    check(addB.code === 0, `CNI ADD of the new sandbox: ${addB.out}`);
    const stale = await cni('DEL', { prevResult: res });
    check(stale.code === 0, `stale CNI DEL: ${stale.out}`);
    const afterStale = await tcpExchange({
      serverNs: node.name,
      clientNs: p3b.name,
      host: '10.96.0.10',
      port: 7109,
      msg: 'after-stale-del',
    });
    result('staleDel', {
      route: sh(node.ns, 'ip route show 192.168.1.12/32').trim().replace(/\s+/g, ' '),
      peer: afterStale.peer,
      leased: leases.has('default/db-0'),
    });
    const delB = await cni('DEL', {}, { id: 'ctr-db-0b', ns: p3b });
    check(delB.code === 0 && leases.size === 0, `CNI DEL of the new sandbox: ${delB.out}`);
    p3b.cleanup();
    // The original sandbox again, for the rest of the scenario.
    check((await cni('ADD')).code === 0, 'CNI ADD again');
    const del1 = await cni('DEL');
    const del2 = await cni('DEL');
    check(del1.code === 0 && del2.code === 0, `CNI DEL: ${del1.out} ${del2.out}`);
    check((await link.find(p3.ns, 'eth0')) === undefined && leases.size === 0, 'CNI DEL left the slave or the lease');
    result('cniDel', true);
  } finally {
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }

  // The last pod on the ENI goes: its host slave and the Service filters go with it.
  const slave = hostSlaveName(eniIndex);
  check((await link.find(node.ns, slave)) !== undefined, `${slave} gone while web-1 still uses the ENI`);
  await teardownIpvlanPod(node.ns, p2.ns, { ifName: 'eth0', ip: '192.168.1.11' });
  const slaveAfter = (await link.find(node.ns, slave)) !== undefined;
  const egressAfter = run('ip', ['netns', 'exec', node.name, 'tc', 'filter', 'show', 'dev', 'eni1', 'egress']).trim();
  const qdiscAfter = run('ip', ['netns', 'exec', node.name, 'tc', 'qdisc', 'show', 'dev', 'eni1']);
  check(
    !slaveAfter && egressAfter === '' && !/clsact/.test(qdiscAfter),
    `after the last DEL: slave ${slaveAfter}, filters "${egressAfter}", qdisc "${qdiscAfter.trim()}"`,
  );
  result('lastDelRemovesSlave', { slave: slaveAfter, filters: egressAfter, clsact: /clsact/.test(qdiscAfter) });

  // GC and repair: pods q1, q2 through the CNI handler and terwayd; q1's sandbox is destroyed without DEL.
  const dir2 = fs.mkdtempSync(path.join(os.tmpdir(), 'terway-lab-gc-'));
  const held = new Map<string, IpLease>();
  const free = ['192.168.1.20', '192.168.1.21'];
  const gcSource: AddressSource = {
    allocate: async (key) => {
      const l = held.get(key) ?? {
        ip: free.shift()!,
        eniId: 'eni-1',
        mac: MAC,
        vswitchId: 'vsw-1',
        vswitchCidr: '192.168.1.0/24',
        gateway: '192.168.1.253',
      };
      held.set(key, l);
      return l;
    },
    release: (key) => held.delete(key),
    leaseOf: (key) => held.get(key),
    leases: () => [...held].map(([key, lease]) => ({ key, lease })),
    gc: (alive) => [...held.keys()].filter((k) => !alive(k) && held.delete(k)),
  };
  const daemon2 = new TerwayDaemon({ pool: gcSource, store: new LeaseStore(path.join(dir2, 'pod.json')), serviceCidr: '10.96.0.0/12' });
  const socket2 = path.join(dir2, 'eni.socket');
  const server2 = new TerwayServer(daemon2, socket2);
  await server2.start();
  const clock = new FakeClock();
  const gc = ipvlanLeaseGc(daemon2, clock, () => undefined);
  const live = () => gcSource.leases().map(({ lease }) => ({ ip: lease.ip, eniMac: lease.mac }));
  try {
    const q1 = newNs('ktq1');
    const q2 = newNs('ktq2');
    for (const [q, name] of [
      [q1, 'q1'],
      [q2, 'q2'],
    ] as const) {
      const conf = {
        cniVersion: '1.0.0',
        name: 'terway',
        type: 'terway',
        socket: socket2,
        eniip_virtual_type: 'ipvlan',
        host_ip: '10.6.0.1',
      };
      const env = {
        CNI_COMMAND: 'ADD',
        CNI_CONTAINERID: `ctr-${name}`,
        CNI_NETNS: q.ns.path,
        CNI_IFNAME: 'eth0',
        CNI_PATH: '/opt/cni/bin',
        CNI_ARGS: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${name}`,
      };
      const r = await useHostNetns(node.ns, () =>
        runPlugin(plugin as unknown as PluginHandlers, { about: 'terway lab' }, { env, stdin: JSON.stringify(conf) }),
      );
      check(r.exitCode === 0, `CNI ADD ${name}: ${r.stdout}`);
    }
    check((await gc()).length === 0, 'GC released a live pod');
    q1.cleanup(); // the runtime destroys the sandbox; no CNI DEL
    sh(node.ns, `ip route add 192.168.1.99/32 dev ${slave} scope link`); // stale: no lease holds .99
    sh(node.ns, `ip route del 192.168.1.21/32 dev ${slave}`); // q2's route lost
    const first = await gc();
    await clock.advance(61_000);
    const second = await gc();
    check(
      first.length === 0 && second.join() === 'default/q1',
      `GC: first ${JSON.stringify(first)}, after the grace period ${JSON.stringify(second)}`,
    );
    result('gcReleased', second);
    const rep = await repairIpvlan(node.ns, live());
    rep.routesRemoved.sort();
    result('repair', rep);
    check(
      rep.routesRemoved.sort().join() === `192.168.1.20/32 dev ${slave},192.168.1.99/32 dev ${slave}` &&
        rep.routesAdded.join() === `192.168.1.21/32 dev ${slave}` &&
        rep.slavesRemoved.length === 0,
      `repair ${JSON.stringify(rep)}`,
    );
    const afterRepair = await tcpExchange({
      serverNs: q2.name,
      clientNs: node.name,
      host: '192.168.1.21',
      port: 7109,
      msg: 'after-repair',
    });
    check(afterRepair.peer === '10.6.0.1', `node -> q2 after repair ${JSON.stringify(afterRepair)}`);
    const svc2 = await tcpExchange({ serverNs: node.name, clientNs: q2.name, host: '10.96.0.10', port: 7110, msg: 'svc-after-repair' });
    check(svc2.peer === '192.168.1.21', `q2 -> Service after repair ${JSON.stringify(svc2)}`);
    result('trafficAfterRepair', true);
    // q2 goes without DEL too: GC frees it, repair removes the ENI's host slave and filters.
    q2.cleanup();
    await gc();
    await clock.advance(61_000);
    const third = await gc();
    const rep2 = await repairIpvlan(node.ns, live());
    const egress2 = run('ip', ['netns', 'exec', node.name, 'tc', 'filter', 'show', 'dev', 'eni1', 'egress']).trim();
    check(
      third.join() === 'default/q2' &&
        rep2.slavesRemoved.join() === slave &&
        (await link.find(node.ns, slave)) === undefined &&
        egress2 === '',
      `last pod gone: GC ${JSON.stringify(third)}, repair ${JSON.stringify(rep2)}, filters "${egress2}"`,
    );
    result('repairRemovesSlave', { gc: third, slavesRemoved: rep2.slavesRemoved.length, filters: egress2 });
  } finally {
    await server2.stop();
    fs.rmSync(dir2, { recursive: true, force: true });
  }

  // terwayd itself in ipvlan mode: start-up, CNI ADD, a sandbox destroyed without DEL, gcOnce.
  const dir3 = fs.mkdtempSync(path.join(os.tmpdir(), 'terway-lab-d-'));
  const api = new FakeOpenApi({
    attachDelayMs: 20,
    onAttached: (eni) => {
      // The ENI's wire (its VPC end up: a master without carrier takes its ipvlan slaves down with it).
      sh(node.ns, `ip link add eni9 address ${eni.mac} type veth peer name vpc9 netns ${vpc.name}`);
      sh(vpc.ns, 'ip link set vpc9 up');
    },
  });
  api.addVSwitch('vsw-lab', 'cn-hangzhou-i', '192.168.9.0/24');
  api.addInstanceType('ecs.g7.large', { eniQuantity: 3, eniPrivateIpAddressQuantity: 10 });
  api.addInstance('i-lab', 'ecs.g7.large', 'vsw-lab');
  await api.listen();
  const clock3 = new FakeClock();
  const socket3 = path.join(dir3, 'eni.socket');
  const td = await startTerwayd({
    eniConf: {
      max_pool_size: 5,
      security_group: 'sg-1',
      access_key: 'LTAI-test',
      access_secret: 'test-secret',
      eniip_virtual_type: 'ipvlan',
      service_cidr: '10.96.0.0/12',
    },
    socket: socket3,
    stateFile: path.join(dir3, 'pod.json'),
    metadataUrl: `http://${api.endpoint}`,
    ecsEndpoint: api.endpoint,
    vpcEndpoint: api.endpoint,
    protocol: 'http',
    hostNs: node.ns,
    clock: clock3,
    gcIntervalMs: 0,
  });
  try {
    const r1 = newNs('ktr1');
    const conf = {
      cniVersion: '1.0.0',
      name: 'terway',
      type: 'terway',
      socket: socket3,
      eniip_virtual_type: 'ipvlan',
      host_ip: '10.6.0.1',
    };
    const env = {
      CNI_COMMAND: 'ADD',
      CNI_CONTAINERID: 'ctr-r1',
      CNI_NETNS: r1.ns.path,
      CNI_IFNAME: 'eth0',
      CNI_PATH: '/opt/cni/bin',
      CNI_ARGS: 'K8S_POD_NAMESPACE=default;K8S_POD_NAME=r1',
    };
    const r = await useHostNetns(node.ns, () =>
      runPlugin(plugin as unknown as PluginHandlers, { about: 'terway lab' }, { env, stdin: JSON.stringify(conf) }),
    );
    check(r.exitCode === 0, `terwayd CNI ADD r1: ${r.stdout}`);
    const r1ip = (JSON.parse(r.stdout) as { ips: { address: string }[] }).ips[0]!.address.split('/')[0]!;
    const eni9 = await link.get(node.ns, 'eni9');
    const slave9 = hostSlaveName(eni9.index);
    const toR1 = await tcpExchange({ serverNs: r1.name, clientNs: node.name, host: r1ip, port: 7111, msg: 'terwayd-node-to-pod' });
    check(toR1.peer === '10.6.0.1', `node -> r1 ${JSON.stringify(toR1)}`);
    check((await td.gcOnce()).length === 0, 'terwayd GC released a live ipvlan pod');
    r1.cleanup(); // no DEL
    const g1 = await td.gcOnce();
    await clock3.advance(61_000);
    const g2 = await td.gcOnce();
    const slaveLeft = (await link.find(node.ns, slave9)) !== undefined;
    check(
      g1.length === 0 && g2.join() === 'default/r1' && !slaveLeft && td.pool.leaseOf('default/r1') === undefined,
      `terwayd GC: ${JSON.stringify({ g1, g2, slaveLeft })}`,
    );
    result('terwaydGc', { released: g2, slaveLeft });
  } finally {
    await td.stop();
    await api.close();
    fs.rmSync(dir3, { recursive: true, force: true });
  }
});
