/**
 * Pod network setup on a node, with the node's namespace given explicitly (coild's own, or a test's "node").
 *
 *   pod:  <ifname> (veth peer) <ipv4>/32 <ipv6>/128; <hostIPv4>/32 dev <ifname> scope link;
 *         default via <hostIPv4>; IPv6: default via fe80::1 (the host veth's fixed link-local address)
 *   host: veth<11 hex> alias COIL:<pool>:<containerID>:<ifname>, carries the node's InternalIP(s);
 *         <ipv4>/32 and <ipv6>/128 dev veth scope link proto 30 in table 116 (ip rule pref 2000 -> 116)
 *
 * The kernel is the state: list() rebuilds every pod from host veth aliases joined with table-116 routes.
 * Idempotency: destroy() of a missing pod succeeds; setup() fails if the pod's interface already exists.
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  CniError,
  CniCode,
  NetlinkError,
  NetnsNotFoundError,
  UndoStack,
  addr,
  isExistsError,
  isNotFoundError,
  link,
  openNetns,
  route,
  rule,
  sysctl,
  type Netns,
  type Result,
} from '@cnikit/netlib';
import { retry, type Backoff } from '@cnikit/netlib/retry';

/** 21 attempts, 1-21 ms apart (random: concurrent listers drift apart). */
const INTERRUPTED_DUMP: Backoff = { steps: 21, initialMs: 1, factor: 1, jitter: 20, capMs: 1 };

export const ALIAS_PREFIX = 'COIL:';
export const HOST_LINK_LOCAL_V6 = 'fe80::1';

export interface PodNetworkConfig {
  podTableId: number;
  podRulePrio: number;
  protocolId: number;
  compatCalico: boolean;
  /** The node's InternalIPs given to every host veth. */
  hostIPv4?: string;
  hostIPv6?: string;
}

export interface PodSpec {
  containerId: string;
  ifname: string;
  netns: string;
  pool: string;
  ipv4?: string;
  ipv6?: string;
  podNamespace?: string;
  podName?: string;
}

/** A pod as the kernel shows it. */
export interface PodInfo {
  pool: string;
  containerId: string;
  ifname: string;
  hostVeth: string;
  hostIndex: number;
  ipv4?: string;
  ipv6?: string;
}

export const podAlias = (pool: string, containerId: string, ifname: string): string => `${ALIAS_PREFIX}${pool}:${containerId}:${ifname}`;

export function parseAlias(alias: string | undefined): { pool: string; containerId: string; ifname: string } | undefined {
  if (!alias?.startsWith(ALIAS_PREFIX)) return undefined;
  const parts = alias.slice(ALIAS_PREFIX.length).split(':');
  if (parts.length !== 3 || parts.some((p) => p === '')) return undefined;
  return { pool: parts[0]!, containerId: parts[1]!, ifname: parts[2]! };
}

export function hostVethName(compatCalico: boolean, podNamespace?: string, podName?: string): string {
  if (compatCalico && podNamespace && podName)
    return `veth${createHash('sha1').update(`${podNamespace}.${podName}`).digest('hex').slice(0, 11)}`;
  return `veth${randomBytes(6).toString('hex').slice(0, 11)}`;
}

export class PodNetwork {
  constructor(
    private readonly host: Netns,
    private readonly cfg: PodNetworkConfig,
  ) {}

  /**
   * Forwarding on, as Coil's PodNetwork.Init does, and ip rule pref <podRulePrio> lookup <podTableId>,
   * both families (idempotent). Pods reach each other and the world only through the node's routing:
   * on a node booted with net.ipv4.ip_forward=0 (the kernel's default) every pod-to-pod packet is dropped.
   */
  async init(): Promise<void> {
    sysctl.set(this.host, 'net/ipv4/ip_forward', '1');
    // Absent when the kernel runs with IPv6 disabled; IPv6 pools then fail at their first address.
    trySysctl(this.host, 'net/ipv6/conf/all/forwarding', '1');
    for (const family of [4, 6] as const) {
      try {
        await rule.add(this.host, { family, priority: this.cfg.podRulePrio, table: this.cfg.podTableId });
      } catch (err) {
        if (!isExistsError(err)) throw err;
      }
    }
  }

  /** Creates the pod's network; everything is undone on failure. Returns the CNI result (1.1.0 shape). */
  async setup(p: PodSpec): Promise<{ result: Result; info: PodInfo }> {
    const { host, cfg } = this;
    let pod: Netns;
    try {
      pod = openNetns(p.netns);
    } catch (err) {
      if (err instanceof NetnsNotFoundError) throw new CniError(CniCode.UnknownContainer, 'netns not found', p.netns, { cause: err });
      throw err;
    }
    const undo = new UndoStack();
    try {
      const hostName = hostVethName(cfg.compatCalico, p.podNamespace, p.podName);
      const { link: hv, peer } = await link.addVeth(host, { name: hostName, peerName: p.ifname, peerNs: pod });
      undo.push(`delete ${hostName}`, () => link.del(host, hv.index));
      if (p.ipv6) {
        trySysctl(pod, `net/ipv6/conf/${p.ifname}/disable_ipv6`, '0');
        trySysctl(pod, `net/ipv6/conf/${p.ifname}/accept_dad`, '0');
        trySysctl(host, `net/ipv6/conf/${hostName}/disable_ipv6`, '0');
        trySysctl(host, `net/ipv6/conf/${hostName}/accept_dad`, '0');
      }
      if (p.ipv4 && !cfg.hostIPv4) throw new CniError(CniCode.InvalidNetworkConfig, 'node has no IPv4 InternalIP for an IPv4 pool');
      // The host side and the pod side are independent (one netlink socket each): set them up concurrently.
      const hostSide = async (): Promise<void> => {
        await link.setAlias(host, hv.index, podAlias(p.pool, p.containerId, p.ifname));
        if (cfg.hostIPv4) await addr.add(host, hv.index, `${cfg.hostIPv4}/32`);
        if (p.ipv6) await addr.add(host, hv.index, `${HOST_LINK_LOCAL_V6}/64`, { noDad: true, scope: 253 });
        if (cfg.hostIPv6) await addr.add(host, hv.index, `${cfg.hostIPv6}/128`, { noDad: true });
        await link.setUp(host, hv.index);
        // Host routes to the pod in table 116.
        for (const a of [p.ipv4 && `${p.ipv4}/32`, p.ipv6 && `${p.ipv6}/128`]) {
          if (!a) continue;
          await route.add(host, { dst: a, oif: hv.index, table: cfg.podTableId, scope: 253, protocol: cfg.protocolId });
        }
      };
      const podSide = async (): Promise<void> => {
        await link.setUp(pod, peer.index);
        if (p.ipv4) {
          await addr.add(pod, peer.index, `${p.ipv4}/32`);
          await route.add(pod, { dst: `${cfg.hostIPv4}/32`, oif: peer.index, scope: 253 });
          await route.add(pod, { dst: 'default', family: 4, gw: cfg.hostIPv4, oif: peer.index });
        }
        if (p.ipv6) {
          await addr.add(pod, peer.index, `${p.ipv6}/128`, { noDad: true });
          await route.add(pod, { dst: 'default', family: 6, gw: HOST_LINK_LOCAL_V6, oif: peer.index });
        }
      };
      const settled = await Promise.allSettled([hostSide(), podSide()]);
      for (const r of settled) if (r.status === 'rejected') throw r.reason;
      undo.commit();
      const ips: NonNullable<Result['ips']> = [];
      if (p.ipv4) ips.push({ address: `${p.ipv4}/32`, gateway: cfg.hostIPv4, interface: 0 });
      if (p.ipv6) ips.push({ address: `${p.ipv6}/128`, gateway: HOST_LINK_LOCAL_V6, interface: 0 });
      const info: PodInfo = { pool: p.pool, containerId: p.containerId, ifname: p.ifname, hostVeth: hostName, hostIndex: hv.index };
      if (p.ipv4) info.ipv4 = p.ipv4;
      if (p.ipv6) info.ipv6 = p.ipv6;
      return { result: { cniVersion: '1.1.0', interfaces: [{ name: p.ifname, mac: peer.mac, sandbox: p.netns }], ips }, info };
    } catch (err) {
      await undo.unwind();
      if (isExistsError(err))
        throw new CniError(CniCode.Internal, `interface ${p.ifname} already exists in ${p.netns}`, '', { cause: err });
      throw err;
    } finally {
      pod.close();
    }
  }

  /**
   * Every pod on the node: COIL: aliases joined with table-116 routes. Dumps that concurrent changes keep
   * interrupting (EINTR after netlib's own retries) are retried after a short random pause.
   */
  list(): Promise<PodInfo[]> {
    return retry({ backoff: INTERRUPTED_DUMP, retriable: (err) => err instanceof NetlinkError && err.errno === 'EINTR' }, () =>
      this.listOnce(),
    );
  }

  private async listOnce(): Promise<PodInfo[]> {
    const links = await link.list(this.host);
    const routes = await route.list(this.host, { table: this.cfg.podTableId });
    const byOif = new Map<number, typeof routes>();
    for (const r of routes) {
      if (r.oif === undefined) continue;
      const l = byOif.get(r.oif) ?? [];
      l.push(r);
      byOif.set(r.oif, l);
    }
    const pods: PodInfo[] = [];
    for (const l of links) {
      const a = parseAlias(l.alias);
      if (!a) continue;
      const info: PodInfo = { ...a, hostVeth: l.name, hostIndex: l.index };
      for (const r of byOif.get(l.index) ?? []) {
        const [ip, len] = r.dst.split('/');
        if (r.family === 6 || ip!.includes(':')) {
          if (len === '128') info.ipv6 = ip;
        } else if (len === '32') info.ipv4 = ip;
      }
      pods.push(info);
    }
    return pods;
  }

  async find(containerId: string, ifname: string): Promise<PodInfo | undefined> {
    return (await this.list()).find((p) => p.containerId === containerId && p.ifname === ifname);
  }

  /**
   * Removes the pod's host veth (the peer and the table-116 routes go with it), found by name and checked by
   * alias (no dump). Succeeds when it is already gone (the pod's netns was deleted first).
   */
  async destroy(p: PodInfo): Promise<void> {
    const l = await link.find(this.host, p.hostVeth);
    if (!l || l.alias !== podAlias(p.pool, p.containerId, p.ifname)) return;
    try {
      await link.del(this.host, l.index);
    } catch (err) {
      if (!isNotFoundError(err)) throw err;
    }
  }

  /**
   * CHECK: the host veth with its alias, the pod's interface with the addresses, the pod's routes, the
   * host routes in table 116. Throws a CniError naming what is missing.
   */
  async check(containerId: string, ifname: string, netns: string, expected: { ipv4?: string; ipv6?: string }): Promise<void> {
    const p = await this.find(containerId, ifname);
    if (!p)
      throw new CniError(CniCode.UnknownContainer, 'host veth not found', `no link with alias ${ALIAS_PREFIX}*:${containerId}:${ifname}`);
    const hl = await link.get(this.host, p.hostIndex);
    if (!hl.up) throw new CniError(CniCode.Internal, 'host veth is down', hl.name);
    for (const fam of ['ipv4', 'ipv6'] as const) {
      if (expected[fam] && p[fam] !== expected[fam]) {
        throw new CniError(CniCode.Internal, `table ${this.cfg.podTableId} route missing`, `${expected[fam]} via ${p.hostVeth}`);
      }
    }
    const pod = openNetns(netns);
    try {
      const pl = await link.find(pod, ifname);
      if (!pl) throw new CniError(CniCode.Internal, 'pod interface missing', `${ifname} in ${netns}`);
      if (!pl.up) throw new CniError(CniCode.Internal, 'pod interface is down', ifname);
      const addrs = (await addr.list(pod, { index: pl.index })).map((a) => a.address);
      const routes = [...(await route.list(pod, { family: 4 })), ...(await route.list(pod, { family: 6 }))];
      if (expected.ipv4) {
        if (!addrs.includes(`${expected.ipv4}/32`))
          throw new CniError(CniCode.Internal, 'pod address missing', `${expected.ipv4}/32 on ${ifname}`);
        if (!routes.some((r) => r.dst === 'default' && r.gw === this.cfg.hostIPv4 && r.oif === pl.index)) {
          throw new CniError(CniCode.Internal, 'pod default route missing', `default via ${this.cfg.hostIPv4} dev ${ifname}`);
        }
      }
      if (expected.ipv6) {
        if (!addrs.includes(`${expected.ipv6}/128`))
          throw new CniError(CniCode.Internal, 'pod address missing', `${expected.ipv6}/128 on ${ifname}`);
        if (!routes.some((r) => r.dst === 'default' && r.gw === HOST_LINK_LOCAL_V6 && r.oif === pl.index)) {
          throw new CniError(CniCode.Internal, 'pod IPv6 default route missing', `default via ${HOST_LINK_LOCAL_V6} dev ${ifname}`);
        }
      }
    } finally {
      pod.close();
    }
  }
}

function trySysctl(ns: Netns, key: string, value: string): void {
  try {
    sysctl.set(ns, key, value);
  } catch {
    // IPv6 disabled by the kernel: addresses will fail with a clear error instead
  }
}
