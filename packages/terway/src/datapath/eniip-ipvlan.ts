/**
 * ENI multi-IP with ipvlan L2 (Terway's `eniip_virtual_type: ipvlan`): the
 * pod's interface is an ipvlan slave of the ENI, so pod traffic to the VPC
 * leaves by the ENI without crossing the host's routing:
 *
 *   pod:  eth0 = ipvlan l2 slave of the ENI, podIP/<vSwitch prefix>;
 *         default via <vSwitch gateway> dev eth0;
 *         <node IP>/32 dev eth0 scope link; each Service CIDR via <node IP> dev eth0
 *   host: ipvl_<ENI ifindex> = ipvlan l2 slave of the same ENI, <node IP>/32, up,
 *         rp_filter=0; podIP/32 dev ipvl_<idx> scope link (node -> pod);
 *         clsact on the ENI, egress: u32 `ip dst <Service CIDR>` ->
 *         mirred ingress redirect dev ipvl_<idx> (pod -> Service: ipvlan sends
 *         frames for addresses no slave owns out of the master; this brings
 *         them back into the host, where kube-proxy's rules apply)
 *   bandwidth: tbf on the pod's eth0 (egress only: no per-pod host device)
 *
 * Slaves of one master in L2 mode reach each other directly (pod <-> pod on
 * the same ENI, node <-> pod through ipvl_<idx>). Needs the ipvlan module
 * (tested in the kernel lab: e2e/kernel-lab/scenarios/terway-ipvlan.ts) and
 * the `tc` program for the clsact filter.
 */
import {
  addr,
  execInNetns,
  ignoreExists,
  ignoreNotFound,
  link,
  route,
  sysctl,
  tunnel,
  UndoStack,
  withFileLock,
  type Netns,
} from '@cnikit/netlib';
import { setRate, type BandwidthLimits } from './bandwidth';

/** The ENI by MAC; its ipvlan slaves share the MAC, so they are skipped. */
export async function findIpvlanEni(hostNs: Netns, mac: string): Promise<link.Link> {
  const want = mac.toLowerCase();
  const l = (await link.list(hostNs)).find((x) => x.mac.toLowerCase() === want && x.kind !== 'ipvlan' && !x.name.startsWith('cali'));
  if (!l) throw new Error(`datapath: no link with the ENI MAC ${mac} on the host`);
  return l;
}

const SCOPE_LINK = 253;
/** Priority of the Service redirect filters on the ENI's clsact egress. */
export const SERVICE_FILTER_PREF = 20000;

export function hostSlaveName(eniIndex: number): string {
  return `ipvl_${eniIndex}`;
}

/** Runs tc in the namespace (netlib's execInNetns: the one way to run a tool); its output, or an error naming the command. */
async function tc(ns: Netns, args: string[]): Promise<string> {
  const r = await execInNetns(ns, 'tc', args);
  if (r.code !== 0) throw new Error(`tc ${args.join(' ')}: exit ${r.code ?? r.signal}: ${r.stderr.trim()}`);
  return r.stdout;
}

export interface IpvlanEni {
  index: number;
  name: string;
  hostSlave: string;
  hostSlaveIndex: number;
}

/**
 * The ENI up, its host slave `ipvl_<idx>` with the node IP, and the Service
 * redirect filters on the ENI's egress (rewritten each time). Idempotent.
 */
export async function ensureIpvlanEni(
  hostNs: Netns,
  o: { mac: string; nodeIp: string; serviceCidrs: string[]; mtu?: number },
): Promise<IpvlanEni> {
  const eni = await findIpvlanEni(hostNs, o.mac);
  if (!eni.up) await link.setUp(hostNs, eni.index);
  const name = hostSlaveName(eni.index);
  let slave = await link.find(hostNs, name);
  if (!slave) slave = await tunnel.addIpvlan(hostNs, { name, parentIndex: eni.index, mode: 'l2', ...(o.mtu ? { mtu: o.mtu } : {}) });
  await ignoreExists(addr.add(hostNs, slave.index, `${o.nodeIp}/32`));
  if (!slave.up) await link.setUp(hostNs, slave.index);
  sysctl.set(hostNs, 'net/ipv4/ip_forward', 1);
  sysctl.set(hostNs, 'net/ipv4/conf/all/rp_filter', 0);
  sysctl.set(hostNs, `net/ipv4/conf/${name}/rp_filter`, 0);
  sysctl.set(hostNs, `net/ipv4/conf/${eni.name}/rp_filter`, 0);
  if (!/clsact/.test(await tc(hostNs, ['qdisc', 'show', 'dev', eni.name]))) await tc(hostNs, ['qdisc', 'add', 'dev', eni.name, 'clsact']);
  if ((await tc(hostNs, ['filter', 'show', 'dev', eni.name, 'egress'])).includes(`pref ${SERVICE_FILTER_PREF} `))
    await tc(hostNs, ['filter', 'del', 'dev', eni.name, 'egress', 'pref', String(SERVICE_FILTER_PREF)]);
  for (const cidr of o.serviceCidrs) {
    await tc(hostNs, [
      'filter',
      'add',
      'dev',
      eni.name,
      'egress',
      'pref',
      String(SERVICE_FILTER_PREF),
      'protocol',
      'ip',
      'u32',
      'match',
      'ip',
      'dst',
      cidr,
      'action',
      'mirred',
      'ingress',
      'redirect',
      'dev',
      name,
    ]);
  }
  return { index: eni.index, name: eni.name, hostSlave: name, hostSlaveIndex: slave.index };
}

export interface IpvlanPod {
  podNamespace: string;
  podName: string;
  ifName: string;
  ip: string;
  /** The vSwitch: the pod's prefix and its gateway. */
  eni: { mac: string; gateway: string; prefix: number };
  /** The node's address (on ipvl_<idx>): the pod's next hop to the node and to Services. */
  nodeIp: string;
  serviceCidrs: string[];
  bandwidth?: BandwidthLimits;
  mtu?: number;
}

/**
 * ADD. A repeated ADD replaces the pod's slave; a failure undoes the pod's
 * part (the shared host slave and filters stay: other pods use them).
 */
export async function setupIpvlanPod(
  hostNs: Netns,
  podNs: Netns,
  p: IpvlanPod,
): Promise<{ hostSlave: string; eniIndex: number; podMac: string }> {
  return withIpvlanLock(() => setupIpvlanPodLocked(hostNs, podNs, p));
}

async function setupIpvlanPodLocked(
  hostNs: Netns,
  podNs: Netns,
  p: IpvlanPod,
): Promise<{ hostSlave: string; eniIndex: number; podMac: string }> {
  const undo = new UndoStack();
  try {
    const eni = await ensureIpvlanEni(hostNs, {
      mac: p.eni.mac,
      nodeIp: p.nodeIp,
      serviceCidrs: p.serviceCidrs,
      ...(p.mtu ? { mtu: p.mtu } : {}),
    });
    const old = await link.find(podNs, p.ifName);
    if (old?.kind === 'ipvlan') await ignoreNotFound(link.del(podNs, old.index));
    const s = await tunnel.addIpvlan(hostNs, {
      name: p.ifName,
      parentIndex: eni.index,
      mode: 'l2',
      targetNs: podNs,
      ...(p.mtu ? { mtu: p.mtu } : {}),
    });
    undo.push(`delete pod ${p.ifName}`, () => ignoreNotFound(link.del(podNs, p.ifName)));
    await link.setUp(podNs, 'lo').catch(() => undefined);
    await addr.add(podNs, s.index, `${p.ip}/${p.eni.prefix}`);
    await link.setUp(podNs, s.index);
    await route.replace(podNs, { dst: `${p.nodeIp}/32`, oif: s.index, scope: SCOPE_LINK });
    await route.replace(podNs, { dst: 'default', gw: p.eni.gateway, oif: s.index });
    for (const cidr of p.serviceCidrs) await route.replace(podNs, { dst: cidr, gw: p.nodeIp, oif: s.index });
    await route.replace(hostNs, { dst: `${p.ip}/32`, oif: eni.hostSlaveIndex, scope: SCOPE_LINK });
    undo.push(`route ${p.ip}/32`, () => ignoreNotFound(route.del(hostNs, { dst: `${p.ip}/32`, oif: eni.hostSlaveIndex })));
    if (p.bandwidth?.egressBps) await setRate(podNs, s.index, p.bandwidth.egressBps);
    undo.commit();
    return { hostSlave: eni.hostSlave, eniIndex: eni.index, podMac: s.mac };
  } catch (e) {
    await undo.unwind();
    throw e;
  }
}

/**
 * DEL: the host route and the pod's slave (when the netns still exists); then,
 * when no pod route is left on that ENI's host slave, the slave and the
 * Service filters go too (an ENI without pods keeps nothing of ours). Idempotent.
 */
export async function teardownIpvlanPod(hostNs: Netns, podNs: Netns | undefined, p: { ifName: string; ip?: string }): Promise<void> {
  if (p.ip) {
    await withIpvlanLock(async () => {
      const links = await link.list(hostNs);
      for (const r of await route.list(hostNs, { family: 4 })) {
        if (r.dst !== `${p.ip}/32` || r.oif === undefined) continue;
        const l = links.find((x) => x.index === r.oif);
        if (!l?.name.startsWith('ipvl_')) continue;
        await ignoreNotFound(route.del(hostNs, { dst: r.dst, oif: r.oif }));
        if ((await podRoutesVia(hostNs, l.index)).length === 0) await releaseIpvlanEni(hostNs, l);
      }
    });
  }
  if (podNs) {
    const l = await link.find(podNs, p.ifName);
    if (l?.kind === 'ipvlan') await ignoreNotFound(link.del(podNs, l.index));
  }
}

/**
 * ADD and DEL of different pods on one ENI run in different processes: the
 * check "no pod route left -> remove the host slave" and "slave present -> add
 * my route" must not interleave, so both hold this node-wide lock.
 */
export const IPVLAN_LOCK_FILE = '/run/terway/ipvlan.lock';

function withIpvlanLock<T>(fn: () => Promise<T>): Promise<T> {
  return withFileLock(process.env['TERWAY_IPVLAN_LOCK'] ?? IPVLAN_LOCK_FILE, fn);
}

/** The pod /32 routes through a host slave. */
async function podRoutesVia(hostNs: Netns, slaveIndex: number): Promise<route.Route[]> {
  return (await route.list(hostNs, { family: 4 })).filter(
    (r) => r.oif === slaveIndex && r.dst?.endsWith('/32') === true && r.scope === SCOPE_LINK,
  );
}

/** The ENI master of a host slave `ipvl_<idx>` (its name carries the master's index). */
function masterIndexOf(slave: link.Link): number | undefined {
  const m = /^ipvl_(\d+)$/.exec(slave.name);
  return m ? Number(m[1]) : undefined;
}

/** Removes an ENI's host slave and our Service filters on the ENI's egress (the clsact too when it is left empty). */
export async function releaseIpvlanEni(hostNs: Netns, slave: link.Link): Promise<void> {
  const master = masterIndexOf(slave);
  await ignoreNotFound(link.del(hostNs, slave.index));
  const eni = master === undefined ? undefined : (await link.list(hostNs)).find((l) => l.index === master);
  if (!eni) return;
  const egress = await tc(hostNs, ['filter', 'show', 'dev', eni.name, 'egress']);
  if (egress.includes(`pref ${SERVICE_FILTER_PREF} `))
    await tc(hostNs, ['filter', 'del', 'dev', eni.name, 'egress', 'pref', String(SERVICE_FILTER_PREF)]);
  const left =
    (await tc(hostNs, ['filter', 'show', 'dev', eni.name, 'egress'])) + (await tc(hostNs, ['filter', 'show', 'dev', eni.name, 'ingress']));
  if (left.trim() === '' && /clsact/.test(await tc(hostNs, ['qdisc', 'show', 'dev', eni.name])))
    await tc(hostNs, ['qdisc', 'del', 'dev', eni.name, 'clsact']);
}

export interface IpvlanLivePod {
  ip: string;
  eniMac: string;
}

export interface IpvlanRepairReport {
  routesRemoved: string[];
  routesAdded: string[];
  slavesRemoved: string[];
}

/**
 * Makes the host match the live leases (terwayd: at start-up and after each GC):
 * pod /32 routes through `ipvl_*` for IPs no live pod holds are removed (pods
 * gone without DEL), missing routes of live pods are re-added when their ENI's
 * host slave exists, and a host slave (with its filters) whose ENI no live pod
 * uses is removed.
 */
export async function repairIpvlan(hostNs: Netns, live: IpvlanLivePod[]): Promise<IpvlanRepairReport> {
  return withIpvlanLock(async () => {
    const rep: IpvlanRepairReport = { routesRemoved: [], routesAdded: [], slavesRemoved: [] };
    const links = await link.list(hostNs);
    const slaves = links.filter((l) => l.kind === 'ipvlan' && masterIndexOf(l) !== undefined);
    const liveIps = new Set(live.map((p) => p.ip));
    const used = new Set<number>();
    for (const p of live) {
      const want = p.eniMac.toLowerCase();
      const eni = links.find((l) => l.mac.toLowerCase() === want && l.kind !== 'ipvlan' && !l.name.startsWith('cali'));
      const slave = eni && slaves.find((s) => s.name === hostSlaveName(eni.index));
      if (!slave) continue;
      used.add(slave.index);
      const have = await podRoutesVia(hostNs, slave.index);
      if (!have.some((r) => r.dst === `${p.ip}/32`)) {
        await route.replace(hostNs, { dst: `${p.ip}/32`, oif: slave.index, scope: SCOPE_LINK });
        rep.routesAdded.push(`${p.ip}/32 dev ${slave.name}`);
      }
    }
    for (const s of slaves) {
      for (const r of await podRoutesVia(hostNs, s.index)) {
        if (liveIps.has(r.dst!.slice(0, -3))) continue;
        await ignoreNotFound(route.del(hostNs, { dst: r.dst!, oif: s.index }));
        rep.routesRemoved.push(`${r.dst} dev ${s.name}`);
      }
      if (!used.has(s.index)) {
        await releaseIpvlanEni(hostNs, s);
        rep.slavesRemoved.push(s.name);
      }
    }
    return rep;
  });
}

/** CHECK: the problems found (empty when all is as ADD left it). */
export async function checkIpvlanPod(hostNs: Netns, podNs: Netns, p: { ifName: string; ip: string; eniMac: string }): Promise<string[]> {
  const problems: string[] = [];
  let slaveIndex: number | undefined;
  try {
    const eni = await findIpvlanEni(hostNs, p.eniMac);
    const s = await link.find(hostNs, hostSlaveName(eni.index));
    if (!s) problems.push(`host slave ${hostSlaveName(eni.index)} is missing`);
    else if (!s.up) problems.push(`host slave ${s.name} is down`);
    else slaveIndex = s.index;
  } catch {
    problems.push(`no ENI link with MAC ${p.eniMac}`);
  }
  if (slaveIndex !== undefined && !(await route.list(hostNs, { family: 4 })).some((r) => r.dst === `${p.ip}/32` && r.oif === slaveIndex))
    problems.push(`host route ${p.ip}/32 dev ipvl_* is missing`);
  const pod = await link.find(podNs, p.ifName);
  if (!pod || pod.kind !== 'ipvlan') problems.push(`pod interface ${p.ifName} is not an ipvlan slave`);
  else if (!(await addr.list(podNs, { index: pod.index, family: 4 })).some((a) => a.address.startsWith(`${p.ip}/`)))
    problems.push(`pod address ${p.ip} on ${p.ifName} is missing`);
  return problems;
}
