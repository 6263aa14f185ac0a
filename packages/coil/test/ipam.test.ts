import * as fs from 'node:fs';
import * as path from 'node:path';
import { toYaml } from '@cnikit/kube';
import { coilCrds } from '../src/api/crds';
import { BitmapAllocator } from '../src/ipam/allocator';
import { blockAt, maxBlocks, nextFreeIndex } from '../src/ipam/pool';
import { KeyedMutex, parseDuration } from '../src/util';

describe('BitmapAllocator', () => {
  it('hands out every index once, then nothing', () => {
    const a = new BitmapAllocator(32);
    const got = new Set<number>();
    for (let i = 0; i < 32; i++) got.add(a.allocate()!);
    expect(got.size).toBe(32);
    expect(a.allocate()).toBeUndefined();
    expect(a.free).toBe(0);
  });
  it('does not reuse a freed index at once (continues after the last one)', () => {
    const a = new BitmapAllocator(4);
    expect(a.allocate()).toBe(0);
    expect(a.allocate()).toBe(1);
    expect(a.clear(0)).toBe(true);
    expect(a.allocate()).toBe(2);
    expect(a.allocate()).toBe(3);
    expect(a.allocate()).toBe(0);
    expect(a.allocate()).toBeUndefined();
  });
  it('set/clear report changes and count', () => {
    const a = new BitmapAllocator(100);
    expect(a.set(70)).toBe(true);
    expect(a.set(70)).toBe(false);
    expect(a.count).toBe(1);
    expect(a.clear(70)).toBe(true);
    expect(a.clear(70)).toBe(false);
    expect(a.count).toBe(0);
    expect(() => a.set(100)).toThrow(RangeError);
  });
  it('size 1 (/32 blocks)', () => {
    const a = new BitmapAllocator(1);
    expect(a.allocate()).toBe(0);
    expect(a.allocate()).toBeUndefined();
  });
});

describe('pool arithmetic', () => {
  const spec = { blockSizeBits: 5, subnets: [{ ipv4: '10.2.0.0/26' }, { ipv4: '10.3.0.0/27' }] };
  it('counts and places blocks across subnets', () => {
    expect(maxBlocks(spec)).toBe(3);
    expect(blockAt(spec, 0)).toEqual({ index: 0, ipv4: '10.2.0.0/27' });
    expect(blockAt(spec, 1)).toEqual({ index: 1, ipv4: '10.2.0.32/27' });
    expect(blockAt(spec, 2)).toEqual({ index: 2, ipv4: '10.3.0.0/27' });
    expect(blockAt(spec, 3)).toBeUndefined();
  });
  it('IPv6 and dual-stack', () => {
    const ds = { blockSizeBits: 5, subnets: [{ ipv4: '10.2.0.0/24', ipv6: 'fd00:1::/120' }] };
    expect(maxBlocks(ds)).toBe(8);
    expect(blockAt(ds, 1)).toEqual({ index: 1, ipv4: '10.2.0.32/27', ipv6: 'fd00:1::20/123' });
    const v6 = { blockSizeBits: 0, subnets: [{ ipv6: 'fd00:2::/126' }] };
    expect(maxBlocks(v6)).toBe(4);
    expect(blockAt(v6, 3)).toEqual({ index: 3, ipv6: 'fd00:2::3/128' });
  });
  it('next free index continues after the last one and wraps', () => {
    expect(nextFreeIndex(4, new Set(), -1)).toBe(0);
    expect(nextFreeIndex(4, new Set([1]), 0)).toBe(2);
    expect(nextFreeIndex(4, new Set([2]), 3)).toBe(0);
    expect(nextFreeIndex(2, new Set([0, 1]), 0)).toBeUndefined();
  });
});

describe('helpers', () => {
  it('KeyedMutex serializes per key, not across keys', async () => {
    const m = new KeyedMutex();
    const order: string[] = [];
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    await Promise.all([
      m.run('a', async () => {
        await sleep(30);
        order.push('a1');
      }),
      m.run('a', async () => {
        order.push('a2');
      }),
      m.run('b', async () => {
        order.push('b1');
      }),
    ]);
    expect(order).toEqual(['b1', 'a1', 'a2']);
    expect(m.size).toBe(0);
    await expect(
      m.run('a', async () => {
        throw new Error('x');
      }),
    ).rejects.toThrow('x');
    await expect(m.run('a', async () => 5)).resolves.toBe(5);
  });
  it('durations', () => {
    expect(parseDuration('5m')).toBe(300_000);
    expect(parseDuration('250ms')).toBe(250);
    expect(() => parseDuration('5')).toThrow(/duration/);
  });
});

describe('manifests', () => {
  it('config/crds.yaml is the dump of src/api/crds.ts', () => {
    const file = path.join(__dirname, '../config/crds.yaml');
    expect(fs.readFileSync(file, 'utf8')).toBe(toYaml(coilCrds()));
  });
});

describe('config/ manifests', () => {
  it('every YAML document parses and names its kind', () => {
    const { loadAll } = jest.requireActual('js-yaml');
    for (const f of ['crds.yaml', 'rbac.yaml', 'deploy.yaml']) {
      const docs = loadAll(fs.readFileSync(path.join(__dirname, '../config', f), 'utf8')) as { kind?: string }[];
      expect(docs.length).toBeGreaterThan(0);
      for (const d of docs) expect(typeof d.kind).toBe('string');
    }
  });
});

describe('pod network names', () => {
  const { hostVethName, parseAlias, podAlias } = jest.requireActual('../src/coild/podnetwork');
  it('host veth names: random, or Calico-compatible from namespace.pod', () => {
    const a = hostVethName(false),
      b = hostVethName(false);
    expect(a).toMatch(/^veth[0-9a-f]{11}$/);
    expect(a).not.toBe(b);
    // the first 11 hex digits of sha1("default.nginx")
    const { createHash } = jest.requireActual('node:crypto');
    expect(hostVethName(true, 'default', 'nginx')).toBe(`veth${createHash('sha1').update('default.nginx').digest('hex').slice(0, 11)}`);
    expect(hostVethName(true, 'default', 'nginx')).toHaveLength(15);
  });
  it('aliases round-trip and reject foreign ones', () => {
    expect(podAlias('default', 'abc', 'eth0')).toBe('COIL:default:abc:eth0');
    expect(parseAlias('COIL:default:abc:eth0')).toEqual({ pool: 'default', containerId: 'abc', ifname: 'eth0' });
    for (const bad of [undefined, '', 'cnikit-veth:x:y', 'COIL:a:b', 'COIL:a::c', 'COIL:a:b:c:d']) expect(parseAlias(bad)).toBeUndefined();
  });
});
