import { CniError, ConfigError, type NetConf } from '@cnikit/netlib';
import { isInterfaceName, parseConfig } from '../src/config';
import { attachmentKey, networkTag, networkTagOfKey, overlayTable, ownTable } from '../src/marks';
import { planMain } from '../src/setup';
import { prevRoutes, sharedRoutes, sharedRules } from '../src/pod';
import { hostRoute } from '../src/host';

const prev = {
  cniVersion: '1.1.0',
  interfaces: [{ name: 'net1', mac: '0a:00:00:00:00:01', sandbox: '/var/run/netns/x' }],
  ips: [{ address: '10.6.1.5/16', gateway: '10.6.0.254', interface: 0 }],
  routes: [{ dst: '0.0.0.0/0' }, { dst: '192.168.0.0/16', gw: '10.6.0.253' }],
};
function conf(extra: Record<string, unknown> = {}): NetConf {
  return {
    cniVersion: '1.1.0',
    name: 'macvlan-router',
    type: 'router',
    overlay_hijack_subnet: ['10.244.0.0/16'],
    service_hijack_subnet: ['10.96.0.0/12'],
    prevResult: prev,
    ...extra,
  } as unknown as NetConf;
}

function errorOf(fn: () => unknown): CniError | undefined {
  try {
    fn();
  } catch (e) {
    if (e instanceof CniError) return e;
    throw e;
  }
  return undefined;
}
const fieldOf = (fn: () => unknown): string | undefined => {
  const e = errorOf(fn);
  return e instanceof ConfigError ? e.field : undefined;
};

describe('router parseConfig', () => {
  it('parses defaults and prevResult', () => {
    const c = parseConfig(conf(), true);
    expect(c.overlayInterface).toBe('eth0');
    expect(c.hostRuleTable).toBe(500);
    expect(c.sriov).toBe(false);
    expect(c.migrateRoute).toBe(-1);
    expect(c.rpFilter).toEqual({ setHost: true, value: 2 });
    expect(c.logOptions.file).toBe('/var/log/meta-plugins/router.log');
    expect(c.netName).toBe('macvlan-router');
    expect(c.prevResult?.ips?.[0]?.address).toBe('10.6.1.5/16');
  });

  it('takes every router field', () => {
    const c = parseConfig(
      conf({
        overlay_interface: 'cali0',
        host_rule_table: 4_000_000_000,
        sriov: true,
        migrate_route: 0,
        skip_call: true,
        additional_hijack_subnet: ['169.254.25.10/32', 'fd00:25::/64'],
      }),
      true,
    );
    expect(c).toMatchObject({ overlayInterface: 'cali0', hostRuleTable: 4_000_000_000, sriov: true, migrateRoute: 0, skipCall: true });
    expect(c.additionalHijackSubnet).toEqual(['169.254.25.10/32', 'fd00:25::/64']);
  });

  it('requires prevResult for ADD/CHECK only', () => {
    const c = conf();
    delete (c as unknown as Record<string, unknown>)['prevResult'];
    expect(errorOf(() => parseConfig(c, true))?.code).toBe(7);
    expect(parseConfig(c, false).prevResult).toBeUndefined();
  });

  it.each([
    [{ overlay_interface: '' }, 'overlay_interface'],
    [{ overlay_interface: 'a-name-that-is-too-long' }, 'overlay_interface'],
    [{ overlay_interface: 'eth 0' }, 'overlay_interface'],
    [{ overlay_interface: 'eth/0' }, 'overlay_interface'],
    [{ overlay_interface: 7 }, 'overlay_interface'],
    [{ host_rule_table: 0 }, 'host_rule_table'],
    [{ host_rule_table: 253 }, 'host_rule_table'],
    [{ host_rule_table: 254 }, 'host_rule_table'],
    [{ host_rule_table: 255 }, 'host_rule_table'],
    [{ host_rule_table: 2 ** 32 }, 'host_rule_table'],
    [{ host_rule_table: 1.5 }, 'host_rule_table'],
    [{ host_rule_table: '500' }, 'host_rule_table'],
    [{ sriov: 'yes' }, 'sriov'],
    [{ migrate_route: 2 }, 'migrate_route'],
    [{ skip_call: 1 }, 'skip_call'],
    [{ rp_filter: { value: 3 } }, 'rp_filter.value'],
    [{ rp_filter: { set_host: 'no' } }, 'rp_filter.set_host'],
    [{ log_options: { log_level: 'loud' } }, 'log_options.log_level'],
    [{ log_options: { log_file: 'relative.log' } }, 'log_options.log_file'],
    [{ overlay_hijack_subnet: [] }, 'overlay_hijack_subnet'],
    [{ overlay_hijack_subnet: ['10.244.0.0/33'] }, 'overlay_hijack_subnet[0]'],
    [{ service_hijack_subnet: ['10.96.0.1/12'] }, 'service_hijack_subnet[0]'],
    [{ service_hijack_subnet: undefined }, 'service_hijack_subnet'],
    [{ additional_hijack_subnet: ['nope'] }, 'additional_hijack_subnet[0]'],
    [{ additional_hijack_subnet: '10.0.0.0/8' }, 'additional_hijack_subnet'],
  ])('rejects %j naming %s (code 7)', (extra, field) => {
    expect(fieldOf(() => parseConfig(conf(extra), true))).toBe(field);
    expect(errorOf(() => parseConfig(conf(extra), true))?.code).toBe(7);
  });

  it('names the service field for a bad service CIDR (the anchor swapped the messages)', () => {
    const e = errorOf(() => parseConfig(conf({ service_hijack_subnet: ['x'] }), true));
    expect(e?.message).toContain('service_hijack_subnet');
    expect(e?.message).not.toContain('overlay');
  });

  it('rejects misspelt snake_case fields with code 2, leaves runtime keys alone', () => {
    const e = errorOf(() => parseConfig(conf({ overlay_interfaces: 'eth0' }), true));
    expect(e?.code).toBe(2);
    expect(e?.message).toContain('overlay_interfaces');
    expect(() =>
      parseConfig(conf({ runtimeConfig: {}, 'cni.dev/valid-attachments': [], ipMasq: false, capabilities: {} }), true),
    ).not.toThrow();
  });

  it('interface names', () => {
    expect(isInterfaceName('eth0')).toBe(true);
    expect(isInterfaceName('123456789012345')).toBe(true);
    expect(isInterfaceName('1234567890123456')).toBe(false);
    expect(isInterfaceName('.')).toBe(false);
    expect(isInterfaceName('a:b')).toBe(false);
  });
});

describe('router marks and plans', () => {
  it('attachment keys carry the network and tell attachments apart', () => {
    const k = attachmentKey('net-a', 'cid1', 'net1');
    expect(k).toBeGreaterThan(0);
    expect(k).toBeLessThan(2 ** 32);
    expect(attachmentKey('net-a', 'cid1', 'net1')).toBe(k);
    expect(attachmentKey('net-a', 'cid1', 'net2')).not.toBe(k);
    expect(attachmentKey('net-a', 'cid2', 'net1')).not.toBe(k);
    expect(networkTagOfKey(k)).toBe(networkTag('net-a'));
    expect(networkTagOfKey(attachmentKey('net-b', 'cid1', 'net1'))).toBe(networkTag('net-b'));
    expect(networkTag('net-a')).not.toBe(networkTag('net-b'));
  });

  it('tables: overlay 99, net1 100, net2 101', () => {
    expect(overlayTable('eth0')).toBe(99);
    expect(ownTable('net1')).toBe(100);
    expect(ownTable('net2')).toBe(101);
  });

  it('plans who owns main', () => {
    const c = parseConfig(conf(), true);
    expect(planMain(c, true)).toEqual({ keepApart: false, takeMain: true });
    expect(planMain(c, false)).toEqual({ keepApart: true, takeMain: false });
    expect(planMain({ ...c, migrateRoute: 0 }, false)).toEqual({ keepApart: false, takeMain: true });
    expect(planMain({ ...c, migrateRoute: 1 }, true)).toEqual({ keepApart: true, takeMain: false });
  });

  it('host routes go to host_rule_table only inside a host subnet', () => {
    expect(hostRoute('10.6.1.5', 7, 42, ['10.6.0.0/16', 'fd00:6::/64'], 500)).toMatchObject({
      dst: '10.6.1.5/32',
      oif: 7,
      table: 500,
      metric: 42,
      protocol: 158,
      scope: 253,
    });
    expect(hostRoute('10.7.1.5', 7, 42, ['10.6.0.0/16'], 500).table).toBe(254);
    expect(hostRoute('fd00:6::15', 7, 42, ['10.6.0.0/16', 'fd00:6::/64'], 500)).toMatchObject({
      dst: 'fd00:6::15/128',
      family: 6,
      table: 500,
    });
  });

  it('shared pod routes and rules', () => {
    const c = parseConfig(conf({ additional_hijack_subnet: ['10.6.0.1/32'] }), true);
    const hostIPs = { v4: ['10.6.0.1', '10.7.0.1'], v6: [] };
    const routes = sharedRoutes(c, 3, ['10.244.0.5'], hostIPs, [4], 99);
    expect(routes.map((r) => `${r.dst} ${r.gw ?? '-'}`)).toEqual([
      '10.6.0.1/32 -',
      '10.7.0.1/32 -',
      '10.244.0.0/16 10.6.0.1',
      '10.96.0.0/12 10.6.0.1',
    ]);
    expect(routes.every((r) => r.src === '10.244.0.5' && r.table === 99 && r.oif === 3 && r.protocol === 158)).toBe(true);
    const rules = sharedRules(c, hostIPs, [4], 99);
    expect(rules.map((r) => r.dst).sort()).toEqual(['10.244.0.0/16', '10.6.0.1/32', '10.7.0.1/32', '10.96.0.0/12']);
    expect(rules.every((r) => r.priority === 90 && r.table === 99)).toBe(true);
    expect(sharedRoutes(c, 3, ['10.244.0.5'], hostIPs, [6], 99)).toEqual([]);
  });

  it('prevResult routes of the chained NIC, gateway from its IP config', () => {
    const r = prevRoutes(prev, 'net1', 9, [4], 254);
    expect(r).toEqual([
      { dst: 'default', family: 4, gw: '10.6.0.254', oif: 9, table: 254, protocol: 158 },
      { dst: '192.168.0.0/16', family: 4, gw: '10.6.0.253', oif: 9, table: 254, protocol: 158 },
    ]);
    expect(prevRoutes(prev, 'net1', 9, [6], 254)).toEqual([]);
  });
});
