/**
 * The ENI multi-IP pool against an in-memory cloud and a fake clock:
 * min/max, warm-up, idle reclaim, quotas, vSwitch choice, sticky IPs, GC,
 * and anchor #100 (a stuck ENI creation stalls nothing else).
 */
import { FakeClock, flush } from '@cnikit/terway-testing';
import { EniIpPool, parsePoolConfig, pickVSwitch, PoolExhaustedError, type PoolConfig } from '../src/pool';
import { MemoryCloud } from './memory-cloud';

function setup(conf: Record<string, unknown>, quota = { eniQuantity: 4, ipsPerEni: 5 }, extra: { allocTimeoutMs?: number } = {}) {
  const clock = new FakeClock();
  const cloud = new MemoryCloud();
  const config: PoolConfig = parsePoolConfig({ vswitches: { 'cn-hangzhou-i': ['vsw-a', 'vsw-b'] }, ...conf });
  const pool = new EniIpPool({ config, quota, cloud, clock, zone: 'cn-hangzhou-i', ...extra });
  return { clock, cloud, pool };
}

async function settle(clock: FakeClock, ms = 0): Promise<void> {
  await flush();
  await clock.advance(ms);
}

describe('pool sizes', () => {
  it('warms up to ip_warm_up_size across ENIs, then stays', async () => {
    const { pool, cloud, clock } = setup({ ip_warm_up_size: 7, max_pool_size: 10 });
    pool.reconcile();
    await settle(clock);
    // 5 IPs per ENI: one ENI of 5 then a second with 2.
    expect(pool.stats()).toMatchObject({ idle: 7, enis: 2, inflight: 0 });
    expect(cloud.count('createEni')).toBe(2);
    expect(cloud.ipCount()).toBe(7);
    await settle(clock, 120_000);
    expect(pool.stats().idle).toBe(7);
  });

  it('keeps min_pool_size idle IPs as pods take them', async () => {
    const { pool, clock } = setup({ min_pool_size: 2, max_pool_size: 5 });
    pool.reconcile();
    await settle(clock);
    expect(pool.stats()).toMatchObject({ idle: 2, used: 0 });
    const a = await pool.allocate('default/a');
    await settle(clock);
    expect(a.ip).toMatch(/^192\.168\.0\./);
    expect(pool.stats()).toMatchObject({ idle: 2, used: 1 });
    // The second ENI IP came from AssignPrivateIpAddresses on the same ENI.
    expect(a.gateway).toBe('192.168.0.253');
  });

  it('returns idle IPs above max_pool_size at once and deletes emptied ENIs', async () => {
    const { pool, cloud, clock } = setup({ max_pool_size: 2 }, { eniQuantity: 4, ipsPerEni: 3 });
    const keys = Array.from({ length: 6 }, (_, i) => `ns/p${i}`);
    const leases = await Promise.all(keys.map((k) => pool.allocate(k)));
    expect(new Set(leases.map((l) => l.ip)).size).toBe(6);
    expect(pool.stats()).toMatchObject({ used: 6, enis: 2 });
    for (const k of keys) pool.release(k);
    await settle(clock);
    expect(pool.stats()).toMatchObject({ used: 0, idle: 2, releasing: 0 });
    expect(cloud.count('deleteEni')).toBe(1);
    expect(cloud.ipCount()).toBe(2);
  });

  it('reclaims IPs idle longer than idle_ip_reclaim_after in batches per interval, down to min', async () => {
    const { pool, cloud, clock } = setup(
      { min_pool_size: 1, max_pool_size: 10, idle_ip_reclaim_after: '60s', idle_ip_reclaim_batch_size: 2, idle_ip_reclaim_interval: '10s' },
      { eniQuantity: 4, ipsPerEni: 10 },
    );
    pool.start();
    const keys = Array.from({ length: 7 }, (_, i) => `ns/p${i}`);
    await Promise.all(keys.map((k) => pool.allocate(k)));
    for (const k of keys) pool.release(k);
    await settle(clock, 1000);
    // 7 released + 1 grown to keep min_pool_size while all 7 were used.
    expect(pool.stats().idle).toBe(8);
    await settle(clock, 58_000); // idle 59 s: nothing yet
    expect(pool.stats().idle).toBe(8);
    await settle(clock, 2000); // 61 s: first batch
    expect(pool.stats().idle).toBe(6);
    await settle(clock, 5000); // within the interval: no second batch
    expect(pool.stats().idle).toBe(6);
    await settle(clock, 5000);
    expect(pool.stats().idle).toBe(4);
    await settle(clock, 30_000);
    expect(pool.stats().idle).toBe(1);
    // The primary IP of the remaining ENI is never unassigned.
    const eni = pool.eniList()[0]!;
    expect(eni.ips).toContain(eni.primaryIp);
    expect(cloud.count('unassignIps')).toBe(4);
    pool.stop();
  });
});

describe('quotas', () => {
  it('caps ENIs at EniQuantity - 1 and IPs at EniPrivateIpAddressQuantity; beyond: code 11', async () => {
    const { pool, cloud } = setup({ max_pool_size: 10 }, { eniQuantity: 3, ipsPerEni: 2 });
    expect(pool.capacity).toBe(4);
    await Promise.all(['a', 'b', 'c', 'd'].map((k) => pool.allocate(`ns/${k}`)));
    expect(cloud.enis.size).toBe(2);
    for (const e of cloud.enis.values()) expect(e.ips.length).toBeLessThanOrEqual(2);
    const err = await pool.allocate('ns/e').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PoolExhaustedError);
    expect((err as PoolExhaustedError).code).toBe(11);
  });

  it('max_eni caps below the instance quota', async () => {
    const { pool } = setup({ max_eni: 1 }, { eniQuantity: 8, ipsPerEni: 3 });
    expect(pool.capacity).toBe(3);
  });

  it('min_eni keeps ENIs attached', async () => {
    const { pool, clock, cloud } = setup({ min_eni: 2, max_pool_size: 0 }, { eniQuantity: 8, ipsPerEni: 3 });
    pool.reconcile();
    await settle(clock);
    await settle(clock);
    expect(cloud.enis.size).toBe(2);
    await settle(clock, 60_000);
    expect(cloud.count('deleteEni')).toBe(0);
  });
});

describe('vSwitch selection', () => {
  const list = [
    { id: 'vsw-1', zone: 'z', cidr: '10.0.1.0/24', available: 3 },
    { id: 'vsw-2', zone: 'z', cidr: '10.0.2.0/24', available: 50 },
    { id: 'vsw-3', zone: 'z', cidr: '10.0.3.0/24', available: 20 },
  ];
  it.each([
    ['ordered', 2, (): number => 0.9, 'vsw-1'],
    ['ordered', 5, (): number => 0.9, 'vsw-2'],
    ['most', 1, (): number => 0, 'vsw-2'],
    ['random', 5, (): number => 0.0, 'vsw-2'],
    ['random', 5, (): number => 0.99, 'vsw-3'],
    ['ordered', 100, (): number => 0, 'vsw-2'],
  ] as const)('%s need=%d', (policy, need, rnd, want) => {
    expect(pickVSwitch(list, policy, need, rnd)?.id).toBe(want);
  });
  it('none when every vSwitch is full', () => {
    expect(pickVSwitch([{ id: 'v', zone: 'z', cidr: '10.0.0.0/24', available: 0 }], 'ordered', 1)).toBeUndefined();
  });

  it('a vSwitch whose ENI creation failed cools down; the next one is used', async () => {
    const { pool, cloud, clock } = setup({ max_pool_size: 10 }, undefined, { allocTimeoutMs: 120_000 });
    cloud.failVSwitch.add('vsw-a');
    const first = pool.allocate('ns/a').catch((e: unknown) => e);
    await settle(clock);
    expect(await first).toBeInstanceOf(PoolExhaustedError);
    await settle(clock, 1000); // backoff
    const l = await pool.allocate('ns/a');
    expect(l.vswitchId).toBe('vsw-b');
  });
});

describe('anchor #100: a stuck ENI creation stalls nothing else', () => {
  it('allocation from the pool, release and GC go on while CreateNetworkInterface hangs', async () => {
    const { pool, cloud, clock } = setup({ max_pool_size: 10 }, { eniQuantity: 4, ipsPerEni: 2 }, { allocTimeoutMs: 30_000 });
    const a = await pool.allocate('ns/a');
    const b = await pool.allocate('ns/b');
    expect(a.eniId).toBe(b.eniId);
    cloud.hold.add('createEni');
    const c = pool.allocate('ns/c');
    await settle(clock);
    expect(cloud.heldCount('createEni')).toBe(1);
    // DEL of b and ADD of d from the pool: immediate.
    expect(pool.release('ns/b')).toBe(true);
    await settle(clock);
    // c was waiting: the released IP went to it at once.
    expect((await c).ip).toBe(b.ip);
    const d = pool.allocate('ns/d');
    await settle(clock);
    pool.release('ns/c');
    expect((await d).ip).toBe(b.ip);
    // GC of a pod deleted without CNI DEL works too.
    expect(pool.gc((k) => k !== 'ns/a')).toEqual(['ns/a']);
    const e = await pool.allocate('ns/e');
    expect(e.ip).toBe(a.ip);
    // A pod that needs the cloud times out with code 11 instead of hanging.
    const f = pool.allocate('ns/f').catch((x: unknown) => x);
    await settle(clock, 30_000);
    const err = await f;
    expect(err).toBeInstanceOf(PoolExhaustedError);
    expect((err as PoolExhaustedError).code).toBe(11);
    // The creation completes later: its IPs land in the pool.
    cloud.release('createEni');
    await settle(clock);
    expect(pool.stats().idle).toBeGreaterThan(0);
    expect((await pool.allocate('ns/g')).eniId).not.toBe(a.eniId);
  });

  it('a failing cloud fails waiters with code 11, backs off, then recovers', async () => {
    const { pool, cloud, clock } = setup({ max_pool_size: 10 });
    cloud.failures.set('createEni', 2);
    const e1 = await pool.allocate('ns/a').catch((x: unknown) => x);
    expect((e1 as PoolExhaustedError).code).toBe(11);
    expect((e1 as Error).message).toMatch(/create ENI in vsw-a failed: createEni: Throttling/);
    // Within the backoff no new call is made.
    const p2 = pool.allocate('ns/a').catch((x: unknown) => x);
    await settle(clock, 500);
    expect(cloud.count('createEni')).toBe(1);
    await settle(clock, 600);
    expect(cloud.count('createEni')).toBe(2);
    expect(await p2).toBeInstanceOf(PoolExhaustedError);
    // Second backoff is 2 s.
    const p3 = pool.allocate('ns/a');
    await settle(clock, 2100);
    expect((await p3).ip).toBeDefined();
  });

  it('says no address can be had while it backs off from a failed call with nothing idle, and not otherwise', async () => {
    const { pool, cloud, clock } = setup({ max_pool_size: 10 });
    expect(pool.unavailable()).toBeUndefined();
    cloud.failures.set('createEni', 1);
    await pool.allocate('ns/a').catch(() => undefined);
    expect(pool.unavailable()).toMatch(/^create ENI in vsw-a failed: createEni: Throttling/);
    // the back-off over, the next allocation asks the cloud again: the node must not wait for a pod that never comes
    await settle(clock, 1100);
    expect(pool.unavailable()).toBeUndefined();
    expect((await pool.allocate('ns/a')).ip).toBeDefined();
    expect(pool.unavailable()).toBeUndefined();
  });
});

describe('sticky IPs and GC', () => {
  it('a reserved IP comes back to the same key and to no other, until it expires', async () => {
    const { pool, clock } = setup({ max_pool_size: 10 });
    const a = await pool.allocate('sts/web-0');
    pool.release('sts/web-0', { reserveForMs: 5 * 60_000 });
    await settle(clock);
    const other = await pool.allocate('sts/other');
    expect(other.ip).not.toBe(a.ip);
    expect((await pool.allocate('sts/web-0')).ip).toBe(a.ip);
    pool.release('sts/web-0', { reserveForMs: 5 * 60_000 });
    await settle(clock, 5 * 60_000 + 1);
    pool.reconcile();
    expect(pool.leases().find((l) => l.key === 'sts/web-0')).toBeUndefined();
    expect(pool.stats().reserved).toBe(0);
  });

  it('allocate is idempotent per key; release of an unknown key is fine', async () => {
    const { pool } = setup({});
    const a1 = await pool.allocate('ns/a');
    const a2 = await pool.allocate('ns/a');
    expect(a2).toEqual(a1);
    expect(pool.release('ns/nope')).toBe(false);
  });

  it('restore() adopts ENIs and leases found at start-up', async () => {
    const { pool } = setup({ max_pool_size: 10 });
    pool.restore(
      [
        {
          eniId: 'eni-x',
          mac: '00:16:3e:00:00:99',
          primaryIp: '192.168.0.50',
          vswitchId: 'vsw-a',
          vswitchCidr: '192.168.0.0/24',
          gateway: '192.168.0.253',
          ips: ['192.168.0.50', '192.168.0.51'],
        },
      ],
      [{ key: 'ns/a', ip: '192.168.0.51' }],
    );
    expect(pool.leaseOf('ns/a')?.ip).toBe('192.168.0.51');
    expect((await pool.allocate('ns/b')).ip).toBe('192.168.0.50');
  });
});

describe('eni_conf parsing', () => {
  it('reads the anchor keys', () => {
    const c = parsePoolConfig({
      max_pool_size: 10,
      min_pool_size: 2,
      ip_warm_up_size: 4,
      idle_ip_reclaim_after: '5m',
      idle_ip_reclaim_interval: '1m30s',
      idle_ip_reclaim_batch_size: 3,
      min_eni: 1,
      max_eni: 3,
      vswitches: { z: ['vsw-1'] },
      vswitch_selection_policy: 'random',
      security_group: 'sg-1',
      service_cidr: '172.16.0.0/16',
      eniip_virtual_type: 'IPVlan',
    });
    expect(c).toMatchObject({
      maxPoolSize: 10,
      minPoolSize: 2,
      warmUpSize: 4,
      idleReclaimAfterMs: 300_000,
      idleReclaimIntervalMs: 90_000,
      idleReclaimBatchSize: 3,
      minEni: 1,
      maxEni: 3,
      vswitches: { z: ['vsw-1'] },
      vswitchPolicy: 'random',
      securityGroups: ['sg-1'],
      serviceCidr: '172.16.0.0/16',
      virtualType: 'ipvlan',
    });
  });
  it.each([
    [{ max_pool_size: -1 }, /eni_conf\.max_pool_size.*non-negative integer.*-1/],
    [{ min_pool_size: 6, max_pool_size: 5 }, /min_pool_size.*at most max_pool_size \(5\).*6/],
    [{ idle_ip_reclaim_after: '5 minutes' }, /idle_ip_reclaim_after.*duration.*5 minutes/],
    [{ idle_ip_reclaim_batch_size: 0 }, /batch_size/],
    [{ vswitches: ['vsw-1'] }, /eni_conf\.vswitches/],
    [{ vswitch_selection_policy: 'best' }, /vswitch_selection_policy.*best/],
    [{ service_cidr: '172.16.0.0' }, /service_cidr/],
    [{ eniip_virtual_type: 'macvlan' }, /eniip_virtual_type/],
  ])('rejects %j', (conf, re) => {
    expect(() => parsePoolConfig(conf)).toThrow(re);
  });
});
