import { ConfigError, type NetConf } from '@cnikit/netlib';
import { parseConfig, parseDuration } from '../src/config';
import { ip } from '@cnikit/netlib';
import { planTables } from '../src/setup';
import { containerOfAlias, hostVethAlias, hostVethMac, hostVethName } from '../src/names';

const prev = {
  cniVersion: '1.1.0',
  interfaces: [{ name: 'eth0', mac: '0a:00:00:00:00:01', sandbox: '/var/run/netns/x' }],
  ips: [{ address: '10.1.0.5/24', gateway: '10.1.0.1', interface: 0 }],
};
function conf(extra: Record<string, unknown> = {}): NetConf {
  return {
    cniVersion: '1.1.0',
    name: 'macvlan-veth',
    type: 'veth',
    overlay_hijack_subnet: ['10.244.0.0/16'],
    service_hijack_subnet: ['10.96.0.0/12'],
    prevResult: prev,
    ...extra,
  } as unknown as NetConf;
}

function fieldOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (e) {
    if (e instanceof ConfigError) return e.field;
    throw e;
  }
  return undefined;
}

describe('veth parseConfig', () => {
  it('parses defaults and prevResult', () => {
    const c = parseConfig(conf(), true);
    expect(c.ipConflict).toEqual({ enabled: false, intervalMs: 1000, retries: 3 });
    expect(c.macPrefix).toBeUndefined();
    expect(c.prevResult?.ips?.[0]?.address).toBe('10.1.0.5/24');
    expect(c.logOptions.file).toBe('/var/log/meta-plugins/veth.log');
  });
  it('takes ip_conflict and mac_prefix', () => {
    const c = parseConfig(conf({ ip_conflict: { enabled: true, interval: '500ms', retries: 2 }, mac_prefix: '0A:1b' }), true);
    expect(c.ipConflict).toEqual({ enabled: true, intervalMs: 500, retries: 2 });
    expect(c.macPrefix).toBe('0a:1b');
  });
  it('requires prevResult for ADD/CHECK only', () => {
    const c = conf();
    delete (c as unknown as Record<string, unknown>)['prevResult'];
    expect(() => parseConfig(c, true)).toThrow(/prevResult/);
    expect(parseConfig(c, false).prevResult).toBeUndefined();
  });
  it.each([
    [{ ip_conflict: { enabled: 'yes' } }, 'ip_conflict.enabled'],
    [{ ip_conflict: { interval: '1h' } }, 'ip_conflict.interval'],
    [{ ip_conflict: { interval: 5 } }, 'ip_conflict.interval'],
    [{ ip_conflict: { retries: 0 } }, 'ip_conflict.retries'],
    [{ ip_conflict: { retry: 1 } }, 'ip_conflict.retry'],
    [{ mac_prefix: '0a:1' }, 'mac_prefix'],
    [{ mac_prefix: '0a:1b:2c' }, 'mac_prefix'],
    [{ mac_prefix: '01:00' }, 'mac_prefix'],
    [{ service_hijack_subnet: ['10.96.0.0/40'] }, 'service_hijack_subnet[0]'],
  ])('rejects %j naming %s', (extra, field) => {
    expect(fieldOf(() => parseConfig(conf(extra), true))).toBe(field);
  });
});

describe('helpers', () => {
  it('durations', () => {
    expect(parseDuration('f', '1s')).toBe(1000);
    expect(parseDuration('f', '1.5s')).toBe(1500);
    expect(parseDuration('f', '250ms')).toBe(250);
    expect(parseDuration('f', '1m')).toBe(60000);
  });
  it('mac from prefix', () => {
    expect(ip.ipToMacV4('0a:1b', '10.1.2.255')).toBe('0a:1b:0a:01:02:ff');
  });
  it('names and aliases', () => {
    expect(hostVethName('0123456789abcdef')).toBe('veth0123456789a');
    expect(hostVethName('0123456789abcdef')).toHaveLength(15);
    const alias = hostVethAlias('net-a', 'cid1');
    expect(containerOfAlias(alias, 'net-a')).toBe('cid1');
    expect(containerOfAlias(alias, 'net-b')).toBeUndefined();
    expect(containerOfAlias(undefined, 'net-a')).toBeUndefined();
    const mac = hostVethMac('cid1');
    expect(mac).toMatch(/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/);
    expect(parseInt(mac.slice(0, 2), 16) & 3).toBe(2); // locally administered, unicast
    expect(hostVethMac('cid1')).toBe(mac);
  });
  it('plans tables', () => {
    const c = parseConfig(conf(), true);
    expect(planTables(c, 'eth0', true)).toEqual({ tables: [254] });
    expect(planTables(c, 'net1', false)).toEqual({ tables: [100], migrateTo: 100 });
    expect(planTables({ ...c, migrateRoute: 0 }, 'net1', false)).toEqual({ tables: [] });
    expect(planTables({ ...c, migrateRoute: 1 }, 'eth0', true)).toEqual({ tables: [254, 99], migrateTo: 99 });
    // Name order, not call order: net1 set up before eth0 still migrates; eth0 then takes main.
    expect(planTables(c, 'net1', true)).toEqual({ tables: [254, 100], migrateTo: 100 });
    expect(planTables(c, 'eth0', false)).toEqual({ tables: [254] });
  });
});
