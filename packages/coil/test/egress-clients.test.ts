// Which pods a router serves (the annotation), the router's own addresses from its env, and the
// metrics it exports (read from files at scrape time).
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Pod } from '@cnikit/kube';
import { Registry } from '@cnikit/kube/prom';
import { clientAddresses, parsePodAddresses, wantsEgress } from '../src/egress/clients';
import { registerEgressMetrics } from '../src/egress/metrics';

const pod = (name: string, annotations: Record<string, string> | undefined, ips: string[], extra: Partial<Pod> = {}): Pod => ({
  metadata: { name, namespace: 'app', ...(annotations ? { annotations } : {}) },
  spec: { containers: [] },
  status: { phase: 'Running', podIPs: ips.map((ip) => ({ ip })), ...(ips[0] ? { podIP: ips[0] } : {}) },
  ...extra,
});

describe('clients of an Egress', () => {
  test('annotation egress.coil.cybozu.com/<namespace>: comma-separated names', () => {
    const p = pod('a', { 'egress.coil.cybozu.com/internet': 'egress, other' }, []);
    expect(wantsEgress(p, 'internet', 'egress')).toBe(true);
    expect(wantsEgress(p, 'internet', 'other')).toBe(true);
    expect(wantsEgress(p, 'internet', 'egres')).toBe(false);
    expect(wantsEgress(p, 'other-net', 'egress')).toBe(false);
  });

  test('addresses of running client pods, both families, canonical, sorted, no duplicates', () => {
    const ann = { 'egress.coil.cybozu.com/internet': 'egress' };
    const pods = [
      pod('a', ann, ['10.64.0.66', 'FD00:64::66']),
      pod('b', ann, ['10.64.0.65']),
      pod('not-annotated', undefined, ['10.64.0.1']),
      pod('other-egress', { 'egress.coil.cybozu.com/internet': 'nat2' }, ['10.64.0.2']),
      pod('host', ann, ['192.168.0.10'], { spec: { containers: [], hostNetwork: true } }),
      pod('done', ann, ['10.64.0.3'], { status: { phase: 'Succeeded', podIPs: [{ ip: '10.64.0.3' }] } }),
      pod('pending', ann, []),
      pod('terminating', ann, ['10.64.0.4'], {
        metadata: { name: 'terminating', namespace: 'app', annotations: ann, deletionTimestamp: '2026-01-01T00:00:00Z' },
      }),
      pod('old-style', ann, [], { status: { phase: 'Running', podIP: '10.64.0.5' } }),
    ];
    expect(clientAddresses(pods, 'internet', 'egress')).toEqual(['10.64.0.4', '10.64.0.5', '10.64.0.65', '10.64.0.66', 'fd00:64::66']);
  });

  test('COIL_POD_ADDRESSES', () => {
    expect(parsePodAddresses('10.72.49.1,FD00:72::1')).toEqual({ podIPv4: '10.72.49.1', podIPv6: 'fd00:72::1' });
    expect(parsePodAddresses(' fd00:72::1 ')).toEqual({ podIPv6: 'fd00:72::1' });
    expect(() => parsePodAddresses('')).toThrow(/no address/);
    expect(() => parsePodAddresses('10.72.49.1,bogus')).toThrow(/"bogus" is not an IP address/);
  });
});

describe('metrics', () => {
  test('conntrack count and limit from the netfilter sysctls, client count; absent files are skipped', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'egress-metrics-'));
    fs.writeFileSync(path.join(dir, 'nf_conntrack_count'), '42\n');
    fs.writeFileSync(path.join(dir, 'nf_conntrack_max'), '262144\n');
    const registry = new Registry();
    let clients = 3;
    registerEgressMetrics({
      registry,
      namespace: 'internet',
      pod: 'egress-0',
      egress: 'egress',
      clients: () => clients,
      netfilterDir: dir,
    });
    let text = await registry.metrics();
    expect(text).toContain('coil_egress_nf_conntrack_entries_count{namespace="internet",pod="egress-0"} 42');
    expect(text).toContain('coil_egress_nf_conntrack_entries_limit{namespace="internet",pod="egress-0"} 262144');
    expect(text).toContain('coil_egress_client_count{namespace="internet",pod="egress-0",egress="egress"} 3');
    fs.writeFileSync(path.join(dir, 'nf_conntrack_count'), '43\n');
    clients = 1;
    text = await registry.metrics();
    expect(text).toContain('coil_egress_nf_conntrack_entries_count{namespace="internet",pod="egress-0"} 43');
    expect(text).toContain('coil_egress_client_count{namespace="internet",pod="egress-0",egress="egress"} 1');
    const empty = new Registry();
    registerEgressMetrics({
      registry: empty,
      namespace: 'n',
      pod: 'p',
      egress: 'e',
      clients: () => 0,
      netfilterDir: path.join(dir, 'absent'),
    });
    expect(await empty.metrics()).not.toMatch(/coil_egress_nf_conntrack_entries_count\{/);
    fs.rmSync(dir, { recursive: true });
  });
});
