/**
 * Several router attachments: a pod with three NICs (eth0, net1, net2; net1
 * and net2 from two networks) keeping separate tables, and two pods sharing
 * the host rule. DEL in either order leaves nothing.
 */
import {
  call,
  changesSince,
  diff,
  json,
  makeTopo,
  pings,
  prevResult,
  routerConf,
  snapshot,
  tableRoutes,
  VERSIONS,
  type IpRoute,
  type IpRule,
  type Topo,
} from './helpers';

jest.setTimeout(60_000);

let t: Topo;
afterEach(() => {
  t?.cleanup();
});

const cidrOf = (r: IpRule): string => `${r.dst ?? r.src}${(r.dstlen ?? r.srclen) !== undefined ? `/${r.dstlen ?? r.srclen}` : ''}`;
const confA = (v: string, prev: Record<string, unknown> | undefined): Record<string, unknown> => routerConf(v, prev, { name: 'net-a' });
const confB = (v: string, prev: Record<string, unknown> | undefined): Record<string, unknown> => routerConf(v, prev, { name: 'net-b' });

describe.each(['v4', 'dual'] as const)('router with three NICs (%s)', (stack) => {
  const v = stack === 'v4' ? '1.1.0' : '0.4.0';
  beforeEach(() => {
    t = makeTopo({ stack, net2: true });
  });

  async function addBoth(): Promise<{ a: Record<string, unknown>; b: Record<string, unknown> }> {
    const a = await call(t, { command: 'ADD', conf: confA(v, prevResult(v, t, 'net1')) });
    expect(a.raw).not.toContain('"code"');
    const b = await call(t, { command: 'ADD', conf: confB(v, prevResult(v, t, 'net2')), ifName: 'net2' });
    expect(b.raw).not.toContain('"code"');
    return { a: a.out!, b: b.out! };
  }

  it('net1 owns main, net2 keeps table 101, eth0 table 99; each path carries real traffic', async () => {
    const changes = changesSince(t);
    const { a, b } = await addBoth();

    // Host: net1's address is in br0's subnet (table 500), net2's is in no host subnet (main).
    expect(tableRoutes(t.host, 500).map((r) => r.dst)).toEqual(['10.6.1.5']);
    expect(json<IpRoute[]>(t.host, 'ip -4 -j route show proto 158').map((r) => `${r.dst} ${r.dev}`)).toEqual(['10.7.1.5 caliP']);

    // Pod: separate tables.
    expect(json<IpRoute[]>(t.pod, 'ip -4 -j route show').find((r) => r.dst === 'default')?.dev).toBe('net1');
    const t101 = tableRoutes(t.pod, 101);
    expect(t101.find((r) => r.dst === 'default')).toMatchObject({ dev: 'net2', gateway: '10.7.0.254' });
    expect(t101.find((r) => r.dst === '10.7.0.0/16')?.dev).toBe('net2');
    expect(tableRoutes(t.pod, 100)).toEqual([]);
    expect(tableRoutes(t.pod, 99).find((r) => r.dst === 'default')?.dev).toBe('eth0');
    const rules = json<IpRule[]>(t.pod, 'ip -4 -j rule show');
    expect(
      rules
        .filter((r) => r.priority === 101)
        .map(cidrOf)
        .sort(),
    ).toEqual(['10.7.0.0/16', '10.7.1.5']);
    expect(rules.filter((r) => r.priority === 99).map(cidrOf)).toEqual(['10.244.0.5']);

    expect(pings(t.pod, '192.168.100.1')).toBe(true); // north-south through net1
    expect(pings(t.pod, '192.168.101.1', '10.7.1.5')).toBe(true); // from net2's address through net2
    expect(pings(t.pod, '10.7.0.9')).toBe(true); // net2's own segment, unsourced
    expect(pings(t.pod, '10.244.0.6')).toBe(true); // overlay through eth0
    expect(pings(t.pod, '10.6.0.1', '10.7.1.5')).toBe(true); // the host, from net2's address, through eth0
    expect(pings(t.host, '10.7.1.5')).toBe(true);
    expect(pings(t.host, '10.6.1.5')).toBe(true);
    if (stack === 'dual') {
      expect(pings(t.pod, 'fd00:101::1', 'fd00:7::15')).toBe(true);
      expect(pings(t.pod, 'fd00:100::1')).toBe(true);
      expect(pings(t.pod, 'fd00:244::6')).toBe(true);
      expect(pings(t.host, 'fd00:7::15')).toBe(true);
    }

    expect((await call(t, { command: 'CHECK', conf: confA(v, a) })).raw).toBe('');
    expect((await call(t, { command: 'CHECK', conf: confB(v, b), ifName: 'net2' })).raw).toBe('');

    // DEL net2 first: net1 keeps working, net2's table and rules are gone.
    expect((await call(t, { command: 'DEL', conf: confB(v, b), ifName: 'net2' })).code).toBe(0);
    expect(tableRoutes(t.pod, 101)).toEqual([]);
    expect(json<IpRule[]>(t.pod, 'ip -4 -j rule show').filter((r) => r.priority === 101)).toEqual([]);
    expect(json<IpRoute[]>(t.host, 'ip -4 -j route show proto 158')).toEqual([]);
    expect(pings(t.pod, '10.244.0.6')).toBe(true);
    expect((await call(t, { command: 'CHECK', conf: confA(v, a) })).raw).toBe('');
    expect((await call(t, { command: 'DEL', conf: confA(v, a) })).code).toBe(0);
    // net2's routes went back to main with DEL: as macvlan left them.
    expect(changes()).toEqual({ host: [], pod: [] });
  });

  it('DEL of net1 first keeps the shared state for net2; DEL of net2 then removes it', async () => {
    const hostBefore = snapshot(t.host);
    const podBefore = snapshot(t.pod);
    const { a, b } = await addBoth();
    expect((await call(t, { command: 'DEL', conf: confA(v, a) })).code).toBe(0);
    expect(tableRoutes(t.pod, 99).some((r) => r.protocol === '158')).toBe(true);
    expect(pings(t.pod, '10.244.0.6', '10.7.1.5')).toBe(true);
    expect(pings(t.host, '10.7.1.5')).toBe(true);
    expect(tableRoutes(t.host, 500)).toEqual([]);
    expect(json<IpRule[]>(t.host, 'ip -4 -j rule show').filter((r) => r.priority === 1000)).toEqual([]);
    expect((await call(t, { command: 'DEL', conf: confB(v, undefined), ifName: 'net2' })).code).toBe(0);
    expect(diff(hostBefore, snapshot(t.host))).toEqual([]);
    // net1 never lost its routes (router only moved eth0's), so main is as before.
    expect(diff(podBefore, snapshot(t.pod))).toEqual([]);
    void b;
  });
});

describe.each(VERSIONS.filter((v) => v !== '0.3.0'))('two pods on one host [%s]', (v) => {
  beforeEach(() => {
    t = makeTopo({ peerNet1: true });
  });
  const peerCall = { containerId: 'peer0123456789', ifName: 'net1' };

  it('share the host rule, which goes with the last attachment', async () => {
    const hostBefore = snapshot(t.host);
    const a = await call(t, { command: 'ADD', conf: routerConf(v, prevResult(v, t)) });
    const b = await call(t, {
      command: 'ADD',
      conf: routerConf(v, prevResult(v, t, 'net1', 6, 6, t.peer.ns.path)),
      netns: t.peer.ns.path,
      ...peerCall,
    });
    expect(a.code + b.code).toBe(0);
    expect(json<IpRule[]>(t.host, 'ip -j rule show').filter((r) => r.priority === 1000)).toHaveLength(1);
    expect(
      json<IpRoute[]>(t.host, 'ip -j route show table 500')
        .map((r) => `${r.dst} ${r.dev}`)
        .sort(),
    ).toEqual(['10.6.1.5 caliP', '10.6.1.6 caliQ']);
    expect(pings(t.host, '10.6.1.6')).toBe(true);
    expect(pings(t.pod, '10.244.0.6')).toBe(true);

    expect((await call(t, { command: 'DEL', conf: routerConf(v, a.out) })).code).toBe(0);
    expect(json<IpRule[]>(t.host, 'ip -j rule show').filter((r) => r.priority === 1000)).toHaveLength(1);
    expect(pings(t.host, '10.6.1.6')).toBe(true);
    expect((await call(t, { command: 'DEL', conf: routerConf(v, b.out), netns: t.peer.ns.path, ...peerCall })).code).toBe(0);
    expect(diff(hostBefore, snapshot(t.host))).toEqual([]);
  });
});
