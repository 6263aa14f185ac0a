import { isExistsError, isNotFoundError, NetlinkError } from '../../src/errors';
import * as rule from '../../src/rule';
import { ipJson } from '@cnikit/netlib-testing';
import { rejection, useNamespaces } from './fixture';

const t = useNamespaces();

interface IpRule {
  priority: number;
  src: string;
  srclen?: number;
  dst?: string;
  dstlen?: number;
  table: string;
  fwmark?: string;
  fwmask?: string;
  iif?: string;
  oif?: string;
}
const ipRules = (family: 4 | 6): IpRule[] => ipJson<IpRule[]>(t.ctr.ns, `-${family} rule show`);

test('a fresh namespace has the kernel default rules', async () => {
  expect(await rule.list(t.ctr.ns, 4)).toEqual([
    { family: 4, priority: 0, table: 255, action: 1 },
    { family: 4, priority: 32766, table: 254, action: 1 },
    { family: 4, priority: 32767, table: 253, action: 1 },
  ]);
  expect((await rule.list(t.ctr.ns, 6)).map((r) => [r.priority, r.table])).toEqual([
    [0, 255],
    [32766, 254],
  ]);
  expect((await rule.list(t.ctr.ns)).map((r) => r.family)).toEqual([4, 4, 4, 6, 6]);
});

test('IPv4: every selector, listed by ip and by list(), then deleted by its fields', async () => {
  const r: rule.Rule = {
    family: 4,
    priority: 100,
    src: '10.1.0.0/24',
    dst: '10.2.0.0/16',
    table: 116,
    fwmark: 0x10,
    fwmask: 0xff,
    iif: 'eth0',
    oif: 'eth1',
  };
  await rule.add(t.ctr.ns, r);
  expect(ipRules(4)).toContainEqual(
    expect.objectContaining({
      priority: 100,
      src: '10.1.0.0',
      srclen: 24,
      dst: '10.2.0.0',
      dstlen: 16,
      table: '116',
      fwmark: '0x10',
      fwmask: '0xff',
      iif: 'eth0',
      oif: 'eth1',
    }),
  );
  expect(await rule.list(t.ctr.ns, 4)).toContainEqual({ ...r, action: 1 });
  await rule.del(t.ctr.ns, { family: 4, priority: 100, table: 116 });
  expect(ipRules(4).map((x) => x.priority)).toEqual([0, 32766, 32767]);
});

test('IPv6: table above 255, source-only rule', async () => {
  await rule.add(t.ctr.ns, { family: 6, priority: 200, src: 'fd00:1::/64', table: 1000 });
  await rule.add(t.ctr.ns, { family: 6, priority: 201, dst: 'fd00:2::5/128', table: 1001 });
  expect(ipRules(6)).toContainEqual(expect.objectContaining({ priority: 200, src: 'fd00:1::', srclen: 64, table: '1000' }));
  expect(ipRules(6)).toContainEqual(expect.objectContaining({ priority: 201, dst: 'fd00:2::5', table: '1001' }));
  expect(await rule.list(t.ctr.ns, 6)).toContainEqual({ family: 6, priority: 200, src: 'fd00:1::/64', table: 1000, action: 1 });
  // v4 rules are untouched
  expect((await rule.list(t.ctr.ns, 4)).length).toBe(3);
  await rule.del(t.ctr.ns, { family: 6, src: 'fd00:1::/64', table: 1000 });
  await rule.del(t.ctr.ns, { family: 6, dst: 'fd00:2::5/128' });
  expect(ipRules(6).map((x) => x.priority)).toEqual([0, 32766]);
});

test('del matches the fields given: a differing field does not delete', async () => {
  await rule.add(t.ctr.ns, { family: 4, priority: 300, fwmark: 0x1, table: 300 });
  expect(isNotFoundError(await rejection(rule.del(t.ctr.ns, { family: 4, priority: 300, table: 301 })))).toBe(true);
  expect(isNotFoundError(await rejection(rule.del(t.ctr.ns, { family: 4, priority: 300, fwmark: 0x2 })))).toBe(true);
  expect(ipRules(4).map((x) => x.priority)).toContain(300);
  await rule.del(t.ctr.ns, { family: 4, fwmark: 0x1 });
  expect(ipRules(4).map((x) => x.priority)).not.toContain(300);
});

test('errors: EEXIST on a duplicate, ENOENT on deleting an absent rule', async () => {
  const r: rule.Rule = { family: 4, priority: 100, src: '10.1.0.0/24', table: 116 };
  await rule.add(t.ctr.ns, r);
  const dup = await rejection(rule.add(t.ctr.ns, r));
  expect(dup).toBeInstanceOf(NetlinkError);
  expect(isExistsError(dup)).toBe(true);
  expect(dup.message).toBe('netlink: add rule pref 100 from 10.1.0.0/24 table 116: EEXIST');
  await rule.add(t.ctr.ns, { family: 6, priority: 100, src: 'fd00::/64', table: 116 });
  expect((await rejection(rule.add(t.ctr.ns, { family: 6, priority: 100, src: 'fd00::/64', table: 116 }))).errno).toBe('EEXIST');
  for (const family of [4, 6] as const) {
    const gone = await rejection(rule.del(t.ctr.ns, { family, priority: 555 }));
    expect(gone.errno).toBe('ENOENT');
    expect(isNotFoundError(gone)).toBe(true);
  }
});
