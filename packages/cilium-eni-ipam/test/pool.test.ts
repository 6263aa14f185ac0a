import { PoolAllocator, PoolExhausted, eniInfo } from '../src/pool';
import { mergeReleaseIps } from '../src/operator';
import type { CiliumNode, ReleaseState } from '../src/types';

const ENI = {
  id: 'eni-1',
  mac: '02:00:00:00:00:01',
  number: 1,
  subnet: { id: 's', cidr: '10.0.64.0/18' },
  vpc: { id: 'v', 'primary-cidr': '10.0.0.0/16', cidrs: ['10.0.0.0/16'] },
};
function node(pool: string[], release: Record<string, ReleaseState> = {}): CiliumNode {
  return {
    metadata: { name: 'n1' },
    spec: { ipam: { pool: Object.fromEntries(pool.map((a) => [a, { resource: 'eni-1' }])) } },
    status: { eni: { enis: { 'eni-1': ENI } }, ipam: { 'release-ips': release } },
  };
}

test('lease carries the ENI MAC, number, subnet, VPC CIDRs and gateway (.1)', () => {
  const p = new PoolAllocator();
  p.setNode(node(['10.0.64.10']));
  expect(p.allocate('c1/eth0')).toEqual({
    ip: '10.0.64.10',
    owner: 'c1/eth0',
    eni: { id: 'eni-1', mac: '02:00:00:00:00:01', number: 1, subnetCidr: '10.0.64.0/18', vpcCidrs: ['10.0.0.0/16'], gateway: '10.0.64.1' },
  });
  expect(eniInfo({ ...ENI, vpc: { id: 'v', 'primary-cidr': '10.0.0.0/16' } }).vpcCidrs).toEqual(['10.0.0.0/16']);
});

test('same owner gets the same IP (ADD retried); DEL frees; unknown DEL is fine', () => {
  const p = new PoolAllocator();
  p.setNode(node(['10.0.64.10', '10.0.64.11']));
  expect(p.allocate('a').ip).toBe('10.0.64.10');
  expect(p.allocate('a').ip).toBe('10.0.64.10');
  expect(p.allocate('b').ip).toBe('10.0.64.11');
  expect(() => p.allocate('c')).toThrow(PoolExhausted);
  expect(p.release('a')).toEqual(['10.0.64.10']);
  expect(p.release('a')).toEqual([]);
  expect(p.allocate('c').ip).toBe('10.0.64.10');
});

test('never hands out an IP in a release handshake (cilium#13412); do-not-release is free again', () => {
  const p = new PoolAllocator();
  p.setNode(
    node(['10.0.64.10', '10.0.64.11', '10.0.64.12', '10.0.64.13'], {
      '10.0.64.10': 'marked-for-release',
      '10.0.64.11': 'ready-for-release',
      '10.0.64.12': 'released',
      '10.0.64.13': 'do-not-release',
    }),
  );
  expect(p.allocate('a').ip).toBe('10.0.64.13');
  expect(() => p.allocate('b')).toThrow(/3 in a release handshake/);
});

test('handshake answers: ready when unused, do-not-release when used, released entries dropped once out of the pool', () => {
  const p = new PoolAllocator();
  p.setNode(node(['10.0.64.10', '10.0.64.11']));
  p.allocate('a'); // .10 used
  p.setNode(
    node(['10.0.64.10', '10.0.64.11'], {
      '10.0.64.10': 'marked-for-release',
      '10.0.64.11': 'marked-for-release',
      '10.0.64.99': 'released',
    }),
  );
  expect(p.answerHandshake()).toEqual({ '10.0.64.10': 'do-not-release', '10.0.64.11': 'ready-for-release' });
  p.setNode(node(['10.0.64.10'], { '10.0.64.11': 'released' }));
  expect(p.answerHandshake()).toEqual({});
  p.setNode(node(['10.0.64.10'], {}));
  expect(p.answerHandshake()).toBeUndefined();
});

test('restore after an agent restart keeps used IPs out of reach', () => {
  const p = new PoolAllocator();
  p.restore({ '10.0.64.10': { owner: 'a', resource: 'eni-1' } });
  p.setNode(node(['10.0.64.10', '10.0.64.11']));
  expect(p.allocate('b').ip).toBe('10.0.64.11');
  expect(p.allocate('a').ip).toBe('10.0.64.10');
});

test('operator merge of release-ips keeps agent answers that arrived after its read', () => {
  // read: .1 marked; agent answered ready since; operator wants .1 marked (unchanged) and marks .2.
  expect(
    mergeReleaseIps({ '1': 'ready-for-release' }, { '1': 'marked-for-release' }, { '1': 'marked-for-release', '2': 'marked-for-release' }),
  ).toEqual({ '1': 'ready-for-release', '2': 'marked-for-release' });
  // operator released .1: wins.
  expect(mergeReleaseIps({ '1': 'ready-for-release' }, { '1': 'ready-for-release' }, { '1': 'released' })).toEqual({ '1': 'released' });
  // operator dropped .3 (aborted) and the agent did not touch it since: dropped; .4 changed by the agent: kept.
  expect(
    mergeReleaseIps({ '3': 'marked-for-release', '4': 'do-not-release' }, { '3': 'marked-for-release', '4': 'marked-for-release' }, {}),
  ).toEqual({ '4': 'do-not-release' });
});

test('holding (CHECK) and releaseExcept (GC)', () => {
  const p = new PoolAllocator();
  p.setNode(node(['10.0.64.10', '10.0.64.11', '10.0.64.12']));
  p.allocate('a/eth0');
  p.allocate('b/eth0');
  p.allocate('c/net1');
  expect(p.holding('b/eth0')?.ip).toBe('10.0.64.11');
  expect(p.holding('x/eth0')).toBeUndefined();
  expect(p.releaseExcept(new Set(['a/eth0', 'c/net1']))).toEqual(['10.0.64.11']);
  expect(p.releaseExcept(new Set(['a/eth0', 'c/net1']))).toEqual([]);
  expect(p.holding('b/eth0')).toBeUndefined();
  expect(p.releaseExcept(new Set())).toEqual(['10.0.64.10', '10.0.64.12']);
});

test("usedIps (the agent's leases op): every IP of the book by IP, with its owner and ENI; a restored entry without an owner has ''", () => {
  const p = new PoolAllocator();
  p.setNode(node(['10.0.64.9', '10.0.64.10', '10.0.64.11']));
  p.restore({ '10.0.64.11': { resource: 'eni-1' } });
  p.allocate('b/net1'); // .9
  p.allocate('a/eth0'); // .10
  expect(p.usedIps()).toEqual([
    { ip: '10.0.64.9', owner: 'b/net1', eni: 'eni-1' },
    { ip: '10.0.64.10', owner: 'a/eth0', eni: 'eni-1' },
    { ip: '10.0.64.11', owner: '', eni: 'eni-1' },
  ]);
});
