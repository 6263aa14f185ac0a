/**
 * The join of `doctor node`: every container ID that any source names becomes one row, judged against the
 * sandbox the runtime has for it:
 *   healthy      a ready sandbox, and every object its cached attachments imply is there;
 *   leaked       objects (cache entries, leases, host veths) of a sandbox that is gone or stopped;
 *   broken       a ready sandbox missing an object: a cached veth attachment without its host veth, a cached
 *                host-local address without its lease, a cached cilium-eni-ipam address the agent's book lacks,
 *                a cached Coil attachment without its host veth or its pod-table route, a cached router
 *                attachment without its host route (CHECK would fail);
 *   conflicting  one IP held by two ready sandboxes.
 * A sandbox being created (in containerd's store, not yet in the CRI's list) is healthy: what it holds is
 * still growing, and CHECK is not due before its ADD returns.
 * router's host routes belong to the attachment whose key their metric is (router's only tie between a route and
 * its attachment): the keys of every network, sandbox and ifname the node knows are tried; a route no key
 * resolves belongs to no sandbox (`router-key:<key>`), and is leaked.
 * Pure: the sources are read by sources.ts.
 */
import { ip as ipm } from '@cnikit/netlib';
import { attachmentKey } from '@cnikit/router/marks';
import {
  COIL_POD_TABLE,
  type CachedAttachment,
  type CiliumCloud,
  type CiliumLease,
  type CoilVeth,
  type HostVeth,
  type Lease,
  type RouterRoute,
  type Sandbox,
  type GcpCloud,
  type GcpRecord,
  type TerwayCloud,
  type TerwayLease,
} from './sources';

export type AttachmentState = 'healthy' | 'leaked' | 'broken' | 'conflicting';

export interface NodeRow {
  containerId: string;
  /** namespace/name of the pod, when the runtime still knows the sandbox. */
  pod?: string;
  sandbox: 'ready' | 'creating' | 'stopped' | 'gone';
  state: AttachmentState;
  /**
   * What this container holds: `cache <network>/<ifname> <ips>`, `lease <network> <ip>`, `veth <name> (<network>)`,
   * `coil <veth> <ifname> <ips> (pool <pool>)`, `router <ip> via <link> (table <table>)`, `terway <ips> (eni <id>)`,
   * `gcp-ipam <network> <ip> (<allocation>)`, `cilium-eni <ip> (eni <id>)`.
   */
  objects: string[];
  problems: string[];
}

export interface NodeSources {
  sandboxes: Sandbox[];
  cached: CachedAttachment[];
  leases: Lease[];
  veths: HostVeth[];
  coil: CoilVeth[];
  router: RouterRoute[];
  terway: TerwayLease[];
  /** gcp-ipam's node-local records (absent in sources read before it was joined). */
  gcp?: GcpRecord[];
  /** The aliases GCE holds on the node's VM (read with --cloud only). */
  gcpCloud?: GcpCloud;
  /** cilium-eni-agent's book (absent: no agent on the node, or it did not answer; nothing is judged by it then). */
  cilium?: CiliumLease[];
  /** The addresses EC2 assigns to the book's ENIs (read with --cloud only). */
  ciliumCloud?: CiliumCloud;
  /** The addresses ECS assigns to the ENIs of terwayd's leases (read with --cloud only). */
  terwayCloud?: TerwayCloud;
}

interface Held {
  cached: CachedAttachment[];
  leases: Lease[];
  veths: HostVeth[];
  coil: CoilVeth[];
  router: RouterRoute[];
  terway: TerwayLease[];
  gcp: GcpRecord[];
  cilium: CiliumLease[];
  /** Aliases on the node's VM held by no record (row gcp-alias:<ip>). */
  aliases: string[];
}

/** The ifnames router attachments get: the cached ones, eth0, and Multus's net1..net9. */
const IFNAMES = ['eth0', ...Array.from({ length: 9 }, (_, i) => `net${i + 1}`)];

/** Container of each router key the node's networks, sandboxes and ifnames make (computed only when router left routes). */
export function routerOwners(s: NodeSources): Map<number, string> {
  const owners = new Map<number, string>();
  if (s.router.length === 0) return owners;
  const networks = new Set(s.cached.map((c) => c.network));
  const ids = new Set([...s.sandboxes.map((x) => x.id), ...s.cached.map((c) => c.containerId)]);
  const ifNames = new Set([...IFNAMES, ...s.cached.map((c) => c.ifName)]);
  for (const network of networks) for (const id of ids) for (const ifName of ifNames) owners.set(attachmentKey(network, id, ifName), id);
  return owners;
}

function byContainer(s: NodeSources): Map<string, Held> {
  const held = new Map<string, Held>();
  const of = (id: string): Held => {
    let h = held.get(id);
    if (!h) held.set(id, (h = { cached: [], leases: [], veths: [], coil: [], router: [], terway: [], gcp: [], cilium: [], aliases: [] }));
    return h;
  };
  for (const c of s.cached) of(c.containerId).cached.push(c);
  for (const l of s.leases) of(l.containerId).leases.push(l);
  for (const v of s.veths) of(v.containerId).veths.push(v);
  for (const v of s.coil) of(v.containerId).coil.push(v);
  for (const l of s.terway) of(l.containerId).terway.push(l);
  for (const r of s.gcp ?? []) of(r.containerId).gcp.push(r);
  for (const l of s.cilium ?? []) of(l.containerId).cilium.push(l);
  // an alias on the VM no record on the node holds: the cloud's leak (held by no container)
  const recorded = new Set((s.gcp ?? []).map((r) => r.ip));
  for (const ip of s.gcpCloud?.aliases ?? []) if (!recorded.has(ip)) of(`gcp-alias:${ip}`).aliases.push(ip);
  const owners = routerOwners(s);
  for (const r of s.router) of(owners.get(r.key) ?? `router-key:${r.key}`).router.push(r);
  return held;
}

function objectsOf(h: Held): string[] {
  return [
    ...h.cached.map((c) => `cache ${c.network}/${c.ifName}${c.ips.length ? ` ${c.ips.join(',')}` : ''}`),
    ...h.leases.map((l) => `lease ${l.network} ${l.ip}`),
    ...h.veths.map((v) => `veth ${v.name} (${v.network})`),
    ...h.coil.map((v) => `coil ${v.name} ${v.ifName}${v.ips.length ? ` ${v.ips.join(',')}` : ''} (pool ${v.pool})`),
    ...h.router.map((r) => `router ${r.ip} via ${r.link} (table ${r.table})`),
    ...h.terway.map((l) => `terway ${[l.ip, l.ip6].filter(Boolean).join(',')} (eni ${l.eniId})`),
    ...h.gcp.map((r) => `gcp-ipam ${r.network} ${r.ip} (${r.allocation})`),
    ...h.cilium.map((l) => `cilium-eni ${l.ip} (eni ${l.eniId})`),
    ...h.aliases.map((ip) => `gcp-alias ${ip}/32`),
  ];
}

/** Why a row not held by a ready sandbox is leaked; rows of objects no container holds have an ID of their kind. */
function leakReason(containerId: string, sandbox: NodeRow['sandbox'], s: NodeSources): string {
  if (containerId.startsWith('gcp-alias:'))
    return `an alias of ${s.gcpCloud?.instance ?? 'the VM'} that no gcp-ipam attachment on the node holds`;
  if (containerId.startsWith('cilium-eni:')) return "an IP in cilium-eni-agent's book with no owner: no attachment holds it";
  return sandbox === 'gone' ? 'the runtime has no such sandbox' : 'the sandbox is stopped: its network should be gone';
}

/**
 * cilium-eni-agent's leases of a ready sandbox whose address EC2 no longer assigns to the lease's ENI (freed
 * behind the agent's back: the VPC drops the pod's traffic, and EC2 may give the address to another ENI).
 * Judged only with --cloud, when EC2 answered.
 */
function unassignedInEc2(h: Held, cloud: CiliumCloud | undefined): string[] {
  if (!cloud || cloud.error) return [];
  return h.cilium.flatMap((l) => {
    const eni = cloud.enis[l.eniId];
    if (!eni) return [`${l.ip}: its ENI ${l.eniId} no longer exists in EC2`];
    return assignedTo(eni, l.ip) ? [] : [`${l.ip} is no longer assigned to ${l.eniId} in EC2 (freed behind the agent's back)`];
  });
}

/** The same for terwayd's leases and ECS: a lease's IPv4 or IPv6 address its ENI no longer has, or an ENI gone. */
function unassignedInEcs(h: Held, cloud: TerwayCloud | undefined): string[] {
  if (!cloud || cloud.error) return [];
  return h.terway.flatMap((l) => {
    const eni = cloud.enis[l.eniId];
    const ips = [l.ip, l.ip6].filter((x): x is string => !!x);
    if (!eni) return [`${ips.join(',')}: its ENI ${l.eniId} no longer exists in ECS`];
    return ips
      .filter((ip) => !eni.ips.includes(ip) && !eni.ipv6s.includes(ip))
      .map((ip) => `${ip} is no longer assigned to ${l.eniId} in ECS (freed behind terwayd's back)`);
  });
}

/** Whether EC2 assigns `ip` to the ENI: as a secondary address or inside one of its /28 prefixes. */
function assignedTo(eni: { addresses: string[]; prefixes: string[] }, ip: string): boolean {
  return (
    eni.addresses.includes(ip) ||
    eni.prefixes.some((p) => {
      try {
        return ipm.contains(p, ip);
      } catch {
        return false; // a malformed address (a hand-edited book) is in no prefix
      }
    })
  );
}

/** What a ready sandbox's cached attachments imply and the node lacks. */
function missingObjects(h: Held, s: NodeSources): string[] {
  const cloud = s.gcpCloud;
  const ciliumRead = s.cilium !== undefined;
  const problems: string[] = [...unassignedInEc2(h, s.ciliumCloud), ...unassignedInEcs(h, s.terwayCloud)];
  // asked only with --cloud, and only when GCE answered
  if (cloud && !cloud.error)
    for (const r of h.gcp)
      if (!cloud.aliases.includes(r.ip))
        problems.push(`${r.network}/${r.ifName}: ${r.ip} is no alias of ${cloud.instance} (gcp-ipam's CHECK fails)`);
  for (const c of h.cached) {
    if (c.plugins.includes('veth') && !h.veths.some((v) => v.network === c.network))
      problems.push(`${c.network}/${c.ifName}: no host veth (the veth plugin's CHECK fails)`);
    if (c.plugins.includes('coil')) problems.push(...coilProblems(c, h.coil));
    if (c.plugins.includes('router')) {
      const key = attachmentKey(c.network, c.containerId, c.ifName);
      for (const ip of c.ips)
        if (!h.router.some((r) => r.key === key && r.ip === ip))
          problems.push(`${c.network}/${c.ifName}: ${ip} has no router host route (router's CHECK fails; the node does not reach it)`);
    }
    if (c.ipam.includes('host-local')) {
      for (const ip of c.ips)
        if (!h.leases.some((l) => l.network === c.network && l.ip === ip))
          problems.push(`${c.network}/${c.ifName}: ${ip} has no host-local lease (another pod may be given it)`);
    }
    // asked only when the agent answered
    if (ciliumRead && c.ipam.includes('cilium-eni-ipam')) {
      for (const ip of c.ips)
        if (!h.cilium.some((l) => l.ip === ip && l.ifName === c.ifName))
          problems.push(`${c.network}/${c.ifName}: ${ip} is not in cilium-eni-agent's book (another pod may be given it; CHECK fails)`);
    }
  }
  return problems;
}

/** A cached Coil attachment needs its host veth and, for each address, the pod table's route to it (Coil #370). */
function coilProblems(c: CachedAttachment, coil: CoilVeth[]): string[] {
  const v = coil.find((x) => x.ifName === c.ifName);
  if (!v) return [`${c.network}/${c.ifName}: no Coil host veth (coil's CHECK fails)`];
  return c.ips
    .filter((ip) => !v.ips.includes(ip))
    .map((ip) => `${c.network}/${c.ifName}: ${ip} has no route in Coil's table ${COIL_POD_TABLE} (nothing on the node reaches the pod)`);
}

/** Every sandbox has its own loopback (the runtime's cni-loopback network caches 127.0.0.1 and ::1 for each). */
const isLoopback = (ip: string): boolean => ip === '::1' || ip.startsWith('127.');

/** IPs held by more than one ready sandbox (from cached results and leases). */
function conflicts(s: NodeSources, ready: Set<string>): Map<string, string[]> {
  const holders = new Map<string, Set<string>>();
  const hold = (ip: string, id: string): void => {
    if (!ready.has(id) || isLoopback(ip)) return;
    if (!holders.has(ip)) holders.set(ip, new Set());
    holders.get(ip)!.add(id);
  };
  for (const c of s.cached) for (const ip of c.ips) hold(ip, c.containerId);
  for (const l of s.leases) hold(l.ip, l.containerId);
  for (const v of s.coil) for (const ip of v.ips) hold(ip, v.containerId);
  for (const l of s.terway) for (const ip of [l.ip, l.ip6]) if (ip) hold(ip, l.containerId);
  for (const r of s.gcp ?? []) hold(r.ip, r.containerId);
  for (const l of s.cilium ?? []) hold(l.ip, l.containerId);
  const byContainerId = new Map<string, string[]>();
  for (const [ip, ids] of holders) {
    if (ids.size < 2) continue;
    for (const id of ids)
      byContainerId.set(id, [...(byContainerId.get(id) ?? []), `${ip} is also held by ${[...ids].filter((x) => x !== id).join(', ')}`]);
  }
  return byContainerId;
}

export function joinNode(s: NodeSources): NodeRow[] {
  const sandboxes = new Map(s.sandboxes.map((x) => [x.id, x]));
  const ready = new Set(s.sandboxes.filter((x) => x.ready).map((x) => x.id));
  const clashes = conflicts(s, ready);
  const rows: NodeRow[] = [];
  for (const [containerId, held] of byContainer(s)) {
    const sb = sandboxes.get(containerId);
    const sandbox = !sb ? 'gone' : sb.ready ? 'ready' : sb.creating ? 'creating' : 'stopped';
    const row: NodeRow = { containerId, sandbox, state: 'healthy', objects: objectsOf(held), problems: [] };
    if (sb?.name) row.pod = `${sb.namespace}/${sb.name}`;
    if (sandbox === 'creating') {
      rows.push(row);
      continue;
    }
    if (sandbox !== 'ready') {
      row.state = 'leaked';
      row.problems.push(leakReason(containerId, sandbox, s));
    } else if (clashes.has(containerId)) {
      row.state = 'conflicting';
      row.problems.push(...clashes.get(containerId)!);
    } else {
      row.problems.push(...missingObjects(held, s));
      if (row.problems.length) row.state = 'broken';
    }
    rows.push(row);
  }
  const order: AttachmentState[] = ['conflicting', 'broken', 'leaked', 'healthy'];
  // worst first; within a state, pods by name, then the IDs of sandboxes the runtime no longer knows
  const key = (r: NodeRow): string => `${order.indexOf(r.state)}${r.pod ? `0${r.pod}` : `1${r.containerId}`}`;
  return rows.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}

export function formatNode(rows: NodeRow[]): string {
  if (rows.length === 0) return 'no pod network attachments on this node\n';
  const lines = rows.map((r) => {
    const head = `${r.state.padEnd(11)} ${(r.pod ?? '-').padEnd(30)} ${r.containerId.slice(0, 13).padEnd(13)} ${r.sandbox.padEnd(7)}`;
    return [head, ...r.objects.map((o) => `    ${o}`), ...r.problems.map((p) => `    ! ${p}`)].join('\n');
  });
  const count = (st: AttachmentState): number => rows.filter((r) => r.state === st).length;
  const summary = `${count('healthy')} healthy, ${count('leaked')} leaked, ${count('broken')} broken, ${count('conflicting')} conflicting`;
  return `${'STATE'.padEnd(11)} ${'POD'.padEnd(30)} ${'CONTAINER'.padEnd(13)} SANDBOX\n${lines.join('\n')}\n${summary}\n`;
}
