import * as link from '../../src/link';
import * as sysctl from '../../src/sysctl';
import { BASELINE_SYSCTLS, sh } from '@cnikit/netlib-testing';
import { thrown, useNamespaces } from './fixture';

const t = useNamespaces();
const cat = (ns: Parameters<typeof sh>[0], path: string): string => sh(ns, `cat /proc/sys/${path}`).trim();

describe('test namespaces', () => {
  // A new namespace copies the host's IPv4 conf/all, conf/default and ip_forward; hosts differ (rp_filter 0 on
  // Debian, 1 on RHEL, 2 on Ubuntu), so every test namespace starts from the kernel's defaults instead.
  test('start from BASELINE_SYSCTLS whatever the host has', () => {
    for (const [key, value] of BASELINE_SYSCTLS) {
      expect([key, cat(t.ctr.ns, key)]).toEqual([key, value]);
      expect([key, cat(t.host.ns, key)]).toEqual([key, value]);
    }
    expect(BASELINE_SYSCTLS.map(([k]) => k)).toEqual(
      expect.arrayContaining(['net/ipv4/ip_forward', 'net/ipv4/conf/all/rp_filter', 'net/ipv4/conf/default/rp_filter']),
    );
  });
});

describe('get and set inside a namespace', () => {
  test('ip_forward: set in one namespace, unchanged in the other', () => {
    sysctl.set(t.ctr.ns, 'net.ipv4.ip_forward', '1');
    expect(cat(t.ctr.ns, 'net/ipv4/ip_forward')).toBe('1');
    expect(cat(t.host.ns, 'net/ipv4/ip_forward')).toBe('0');
    expect(sysctl.get(t.ctr.ns, 'net/ipv4/ip_forward')).toBe('1');
    expect(sysctl.get(t.host.ns, 'net.ipv4.ip_forward')).toBe('0');
    sysctl.set(t.ctr.ns, 'net/ipv4/ip_forward', 0);
    expect(cat(t.ctr.ns, 'net/ipv4/ip_forward')).toBe('0');
  });

  test('IPv6 keys', () => {
    sysctl.set(t.ctr.ns, 'net.ipv6.conf.all.forwarding', 1);
    expect(cat(t.ctr.ns, 'net/ipv6/conf/all/forwarding')).toBe('1');
    expect(cat(t.host.ns, 'net/ipv6/conf/all/forwarding')).toBe('0');
    sysctl.set(t.ctr.ns, 'net/ipv6/conf/lo/disable_ipv6', '1');
    expect(sysctl.get(t.ctr.ns, 'net.ipv6.conf.lo.disable_ipv6')).toBe('1');
  });

  test('per-interface keys for an interface whose name contains a dot', async () => {
    await link.add(t.ctr.ns, { name: 'eth0.100', kind: 'bridge' });
    sysctl.set(t.ctr.ns, 'net.ipv4.conf.eth0.100.rp_filter', 2);
    expect(cat(t.ctr.ns, 'net/ipv4/conf/eth0.100/rp_filter')).toBe('2');
    expect(sysctl.get(t.ctr.ns, 'net/ipv4/conf/eth0.100/rp_filter')).toBe('2');
    sysctl.set(t.ctr.ns, 'net.ipv6.conf.eth0.100.accept_ra', '0');
    expect(cat(t.ctr.ns, 'net/ipv6/conf/eth0.100/accept_ra')).toBe('0');
    // The interface exists only in the container namespace.
    expect(thrown(() => sysctl.get(t.host.ns, 'net/ipv4/conf/eth0.100/rp_filter')).code).toBe('ENOENT');
  });

  test('an unknown key throws ENOENT', () => {
    expect(thrown(() => sysctl.get(t.ctr.ns, 'net.ipv4.no_such_thing')).code).toBe('ENOENT');
    expect(thrown(() => sysctl.set(t.ctr.ns, 'net/ipv4/conf/nope0/rp_filter', 1)).code).toBe('ENOENT');
  });
});
