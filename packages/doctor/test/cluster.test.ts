// doctor cluster: Coil's blocks against the Nodes, each pool's capacity, addresses held by two live pods.
import { clusterHealthy, formatCluster, judgeCluster, poolCapacity, type ClusterFacts } from '../src/cluster';

const pool = { name: 'default', blockSizeBits: 5, subnets: [{ ipv4: '10.100.0.0/16' }] };
const facts = (over: Partial<ClusterFacts> = {}): ClusterFacts => ({
  nodes: ['kl-a', 'kl-b'],
  pools: [pool],
  blocks: [
    { name: 'default-0', pool: 'default', node: 'kl-a', ipv4: '10.100.0.0/27' },
    { name: 'default-1', pool: 'default', node: 'kl-b', ipv4: '10.100.0.32/27' },
    { name: 'default-2', pool: 'default', node: 'kl-a', ipv4: '10.100.0.64/27' },
  ],
  pods: [
    { pod: 'default/a', node: 'kl-a', ips: ['10.100.0.1'] },
    { pod: 'default/b', node: 'kl-b', ips: ['10.100.0.33'] },
  ],
  ...over,
});

describe('poolCapacity', () => {
  test('2^(host bits - blockSizeBits) per subnet, summed; a dual-stack subnet counts once', () => {
    expect(poolCapacity(pool)).toBe(2048);
    expect(poolCapacity({ name: 'p', blockSizeBits: 0, subnets: [{ ipv4: '10.0.0.0/24' }, { ipv4: '10.1.0.0/30' }] })).toBe(260);
    expect(poolCapacity({ name: 'p', blockSizeBits: 5, subnets: [{ ipv4: '10.0.0.0/24', ipv6: 'fd00::/120' }] })).toBe(8);
    expect(poolCapacity({ name: 'p', blockSizeBits: 6, subnets: [{ ipv6: 'fd00::/112' }] })).toBe(1024);
  });

  test('a subnet smaller than a block, or unreadable, holds none', () => {
    expect(poolCapacity({ name: 'p', blockSizeBits: 5, subnets: [{ ipv4: '10.0.0.0/30' }, { ipv4: '10.0.0.0' }] })).toBe(0);
  });
});

describe('judgeCluster', () => {
  test('every block on a live node, no address twice: healthy, with the blocks in use per node', () => {
    const r = judgeCluster(facts());
    expect(r).toEqual({
      coil: true,
      pools: [{ pool: 'default', blocks: 3, capacity: 2048, byNode: { 'kl-a': 2, 'kl-b': 1 } }],
      leakedBlocks: [],
      gcpIpam: false,
      leakedAllocations: [],
      conflicts: [],
    });
    expect(clusterHealthy(r)).toBe(true);
    expect(formatCluster(r)).toBe('pool default: 3/2048 blocks in use (kl-a 2, kl-b 1)\n0 leaked blocks, 0 conflicting addresses\n');
  });

  test('a block whose node is gone is leaked, and still counted in the pool', () => {
    const r = judgeCluster(facts({ nodes: ['kl-a'] }));
    expect(r.leakedBlocks).toEqual([{ name: 'default-1', pool: 'default', node: 'kl-b', ipv4: '10.100.0.32/27' }]);
    expect(r.pools[0]!.blocks).toBe(3);
    expect(clusterHealthy(r)).toBe(false);
    expect(formatCluster(r)).toMatch(/^leaked {3}block default-1 \(pool default, 10\.100\.0\.32\/27\): node kl-b is gone$/m);
  });

  test('an address held by two live pods is a conflict naming both, on any node', () => {
    const pods = [
      { pod: 'default/a', node: 'kl-a', ips: ['10.100.0.1'] },
      { pod: 'web/z', node: 'kl-b', ips: ['10.100.0.1', 'fd00::1'] },
      { pod: 'web/y', node: 'kl-b', ips: ['fd00::1'] },
    ];
    const r = judgeCluster(facts({ pods }));
    expect(r.conflicts).toEqual([
      { ip: '10.100.0.1', pods: ['default/a', 'web/z'] },
      { ip: 'fd00::1', pods: ['web/y', 'web/z'] },
    ]);
    expect(clusterHealthy(r)).toBe(false);
    expect(formatCluster(r)).toMatch(/^conflict 10\.100\.0\.1 held by default\/a, web\/z$/m);
  });

  test('no Coil in the cluster: said, and addresses still checked', () => {
    const r = judgeCluster(facts({ pools: undefined, blocks: [] }));
    expect(r).toMatchObject({ coil: false, pools: [], leakedBlocks: [] });
    expect(formatCluster(r)).toMatch(/^Coil: not installed/);
  });
});

describe("gcp-ipam's allocations", () => {
  const allocation = (name: string, pod: string, podUID: string, migrating = false) => ({
    name,
    pool: 'live',
    ip: `10.111.0.${name.slice(-1)}`,
    pod,
    podUID,
    node: 'kl-a',
    migrating,
  });
  const pods = [
    { pod: 'default/a', uid: 'ua', node: 'kl-a', ips: ['10.111.0.1'] },
    { pod: 'default/c', uid: 'uc-new', node: 'kl-a', ips: [] },
  ];

  test('one whose pod is gone, or is another pod of the same name now, is leaked; one kept for a migration is not', () => {
    const r = judgeCluster(
      facts({
        pods,
        allocations: [
          allocation('live-1', 'default/a', 'ua'),
          allocation('live-2', 'default/b', 'ub'),
          allocation('live-3', 'default/c', 'uc-old'),
          allocation('live-4', 'default/d', 'ud', true),
        ],
      }),
    );
    expect(r.gcpIpam).toBe(true);
    expect(r.leakedAllocations.map((a) => `${a.name}: ${a.why}`)).toEqual([
      'live-2: pod default/b is gone',
      'live-3: pod default/c is another pod now (uid uc-new)',
    ]);
    expect(clusterHealthy(r)).toBe(false);
    expect(formatCluster(r)).toMatch(
      /^leaked {3}allocation live-2 \(pool live, 10\.111\.0\.2 on kl-a\): pod default\/b is gone; doctor node --gc on kl-a releases it$/m,
    );
    expect(formatCluster(r)).toMatch(/2 leaked gcp-ipam allocations/);
  });

  test('a pod that is not live holds no address for the conflict check', () => {
    const r = judgeCluster(facts({ pods: [...pods, { pod: 'default/old', uid: 'uo', node: 'kl-a', ips: [] }] }));
    expect(r.conflicts).toEqual([]);
  });
});
