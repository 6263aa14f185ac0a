// The IPAM plugin in-process (runPlugin) against a stand-in agent on a UNIX socket (same protocol, same
// PoolAllocator), with a test "host" netns holding an ENI link (a veth with the ENI's MAC). Root only.
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { runPlugin } from '@cnikit/netlib';
import { newNs, prerequisite, sh, useHostNetns } from '@cnikit/netlib-testing';
import * as plugin from '../src/plugin';
import { PoolAllocator } from '../src/pool';
import { stubAgent } from '@cnikit/cilium-eni-ipam-testing';
import type { CiliumNode } from '../src/types';

const VERSIONS = ['0.3.1', '0.4.0', '1.0.0', '1.1.0'];
const CHECK_VERSIONS = ['0.4.0', '1.0.0', '1.1.0'];
const MAC = '02:aa:bb:cc:dd:01';
const root = process.getuid?.() === 0;
const d = prerequisite(root, 'the plugin routing tests', 'they need root (network namespaces)') ? describe : describe.skip;

d('cilium-eni-ipam plugin (netns)', () => {
  let host: ReturnType<typeof newNs>;
  let dir: string;
  let srv: net.Server;
  let pool: PoolAllocator;
  beforeEach(async () => {
    host = newNs('enih');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'eni-ipam-'));
    pool = new PoolAllocator();
    const n: CiliumNode = {
      metadata: { name: 'n1' },
      spec: { ipam: { pool: { '10.0.64.10': { resource: 'eni-1' }, '10.0.64.11': { resource: 'eni-1' } } } },
      status: {
        eni: {
          enis: {
            'eni-1': {
              id: 'eni-1',
              mac: MAC,
              number: 1,
              subnet: { id: 's', cidr: '10.0.64.0/18' },
              vpc: { id: 'v', cidrs: ['10.0.0.0/16', '172.16.0.0/16'] },
            },
          },
        },
      },
    };
    pool.setNode(n);
    srv = await stubAgent(path.join(dir, 'agent.sock'), pool);
    sh(host.ns, `ip link add eni1 address ${MAC} type veth peer name eni1p && ip link set eni1p up && ip addr add 10.0.64.5/18 dev eni1`);
  });
  afterEach(async () => {
    await new Promise((r) => srv.close(r));
    host.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const conf = (v: string, extra: Record<string, unknown> = {}) =>
    JSON.stringify({
      cniVersion: v,
      name: 'eni',
      type: 'cilium-cni',
      ipam: { type: 'cilium-eni-ipam', socket: path.join(dir, 'agent.sock'), ...extra },
    });
  const env = (cmd: string, id = 'c0ffee01') => ({
    CNI_COMMAND: cmd,
    CNI_CONTAINERID: id,
    CNI_NETNS: '/var/run/netns/none',
    CNI_IFNAME: 'eth0',
    CNI_PATH: '/nonexistent',
  });

  test.each(VERSIONS)(
    '[%s] ADD: IP from the pool, ENI MAC/number, gateway, VPC routes; rule to the ENI table; DEL removes the rules',
    async (v) => {
      await useHostNetns(host.ns, async () => {
        const r = await runPlugin(plugin, { about: 't' }, { env: env('ADD'), stdin: conf(v) });
        expect(r.stderr).toBe('');
        expect(r.exitCode).toBe(0);
        const res = JSON.parse(r.stdout);
        expect(res.ips[0].address).toBe('10.0.64.10/18');
        expect(res.ips[0].gateway).toBe('10.0.64.1');
        expect(res.routes).toEqual([
          { dst: '10.0.0.0/16', gw: '10.0.64.1' },
          { dst: '172.16.0.0/16', gw: '10.0.64.1' },
        ]);
        expect(res.interfaces).toEqual([{ name: 'eni1', mac: MAC }]);
        const rules = sh(host.ns, 'ip rule show');
        expect(rules).toMatch(/111:\s+from 10\.0\.64\.10 lookup 11/);
        expect(rules).toMatch(/20:\s+from all to 10\.0\.64\.10 lookup main/);
        expect(sh(host.ns, 'ip route show table 11')).toMatch(/default via 10\.0\.64\.1 dev eni1/);
        const dl = await runPlugin(plugin, { about: 't' }, { env: env('DEL'), stdin: conf(v) });
        expect(dl.exitCode).toBe(0);
        expect(sh(host.ns, 'ip rule show')).not.toMatch(/10\.0\.64\.10/);
        expect(pool.used.size).toBe(0);
        // DEL again: idempotent.
        expect((await runPlugin(plugin, { about: 't' }, { env: env('DEL'), stdin: conf(v) })).exitCode).toBe(0);
      });
    },
  );

  test('pool exhausted: code 11 (try again later); routing failure rolls the lease back', async () => {
    await useHostNetns(host.ns, async () => {
      await runPlugin(plugin, { about: 't' }, { env: env('ADD', 'aaaa1111'), stdin: conf('1.1.0') });
      await runPlugin(plugin, { about: 't' }, { env: env('ADD', 'aaaa2222'), stdin: conf('1.1.0') });
      const r = await runPlugin(plugin, { about: 't' }, { env: env('ADD', 'aaaa3333'), stdin: conf('1.1.0') });
      expect(r.exitCode).toBe(1);
      expect(JSON.parse(r.stdout).code).toBe(11);
      sh(host.ns, 'ip link del eni1');
      await runPlugin(plugin, { about: 't' }, { env: env('DEL', 'aaaa2222'), stdin: conf('1.1.0') });
      const r2 = await runPlugin(plugin, { about: 't' }, { env: env('ADD', 'aaaa4444'), stdin: conf('1.1.0') });
      expect(JSON.parse(r2.stdout)).toMatchObject({ code: 11, msg: expect.stringContaining('routing') });
      expect(pool.used.size).toBe(1);
    });
  });

  test('agent unreachable: ADD 11, STATUS 50; bad config: 7 naming the field', async () => {
    await useHostNetns(host.ns, async () => {
      const bad = JSON.stringify({
        cniVersion: '1.1.0',
        name: 'eni',
        type: 'x',
        ipam: { type: 'cilium-eni-ipam', socket: path.join(dir, 'nope.sock') },
      });
      expect(JSON.parse((await runPlugin(plugin, { about: 't' }, { env: env('ADD'), stdin: bad })).stdout).code).toBe(11);
      expect(
        JSON.parse((await runPlugin(plugin, { about: 't' }, { env: { CNI_COMMAND: 'STATUS', CNI_PATH: '/x' }, stdin: bad })).stdout).code,
      ).toBe(50);
      expect(
        (await runPlugin(plugin, { about: 't' }, { env: { CNI_COMMAND: 'STATUS', CNI_PATH: '/x' }, stdin: conf('1.1.0') })).exitCode,
      ).toBe(0);
      const r = await runPlugin(plugin, { about: 't' }, { env: env('ADD'), stdin: conf('1.1.0', { 'table-offset': -1 }) });
      expect(JSON.parse(r.stdout)).toMatchObject({ code: 7, msg: expect.stringContaining('ipam.table-offset') });
    });
  });
  test.each(CHECK_VERSIONS)(
    '[%s] CHECK: passes after ADD; fails when the ENI table route, the rule or the allocation is gone',
    async (v) => {
      await useHostNetns(host.ns, async () => {
        const a = await runPlugin(plugin, { about: 't' }, { env: env('ADD'), stdin: conf(v) });
        expect(a.exitCode).toBe(0);
        const prevResult = JSON.parse(a.stdout);
        const withPrev = JSON.stringify({ ...JSON.parse(conf(v)), prevResult });
        const chk = () => runPlugin(plugin, { about: 't' }, { env: env('CHECK'), stdin: withPrev });
        let r = await chk();
        expect(r.stdout).toBe('');
        expect(r.exitCode).toBe(0);
        // the ENI table lost its default route
        sh(host.ns, 'ip route del default table 11');
        r = await chk();
        expect(r.exitCode).toBe(1);
        expect(JSON.parse(r.stdout)).toMatchObject({ code: 999, details: expect.stringContaining('default via 10.0.64.1') });
        sh(host.ns, 'ip route add default via 10.0.64.1 dev eni1 table 11');
        expect((await chk()).exitCode).toBe(0);
        // the rule from the pod IP is gone
        sh(host.ns, 'ip rule del from 10.0.64.10/32 lookup 11 pref 111');
        r = await chk();
        expect(JSON.parse(r.stdout)).toMatchObject({ code: 999, details: expect.stringContaining('rule from 10.0.64.10 lookup 11') });
        sh(host.ns, 'ip rule add from 10.0.64.10/32 lookup 11 pref 111');
        expect((await chk()).exitCode).toBe(0);
        // a prevResult naming another IP than the agent holds
        const other = { ...prevResult, ips: [{ ...prevResult.ips[0], address: '10.0.64.11/18' }] };
        r = await runPlugin(
          plugin,
          { about: 't' },
          { env: env('CHECK'), stdin: JSON.stringify({ ...JSON.parse(conf(v)), prevResult: other }) },
        );
        expect(JSON.parse(r.stdout)).toMatchObject({ code: 999, details: expect.stringContaining('holds 10.0.64.10') });
        // the agent no longer holds the allocation
        pool.release('c0ffee01/eth0');
        r = await chk();
        expect(JSON.parse(r.stdout)).toMatchObject({ code: 999, details: expect.stringContaining('holds no IP for c0ffee01/eth0') });
      });
    },
  );

  test('[0.3.1] CHECK does not exist: code 1', async () => {
    await useHostNetns(host.ns, async () => {
      const r = await runPlugin(plugin, { about: 't' }, { env: env('CHECK'), stdin: conf('0.3.1') });
      expect(JSON.parse(r.stdout).code).toBe(1);
    });
  });

  test('[1.1.0] GC: frees the IPs of attachments not in cni.dev/valid-attachments and removes their rules; keeps the valid one', async () => {
    await useHostNetns(host.ns, async () => {
      expect((await runPlugin(plugin, { about: 't' }, { env: env('ADD', 'keep0001'), stdin: conf('1.1.0') })).exitCode).toBe(0);
      expect((await runPlugin(plugin, { about: 't' }, { env: env('ADD', 'gone0002'), stdin: conf('1.1.0') })).exitCode).toBe(0);
      expect(sh(host.ns, 'ip rule show')).toMatch(/from 10\.0\.64\.11 lookup 11/);
      const gcConf = (list?: unknown) =>
        JSON.stringify({ ...JSON.parse(conf('1.1.0')), ...(list === undefined ? {} : { 'cni.dev/valid-attachments': list }) });
      const gcEnv = { CNI_COMMAND: 'GC', CNI_PATH: '/x' };
      // no list: code 7, nothing freed
      const bad = await runPlugin(plugin, { about: 't' }, { env: gcEnv, stdin: gcConf() });
      expect(JSON.parse(bad.stdout)).toMatchObject({ code: 7, msg: expect.stringContaining('cni.dev/valid-attachments') });
      expect(pool.used.size).toBe(2);
      const r = await runPlugin(plugin, { about: 't' }, { env: gcEnv, stdin: gcConf([{ containerID: 'keep0001', ifname: 'eth0' }]) });
      expect(r.stdout).toBe('');
      expect(r.exitCode).toBe(0);
      expect([...pool.used.values()].map((u) => u.owner)).toEqual(['keep0001/eth0']);
      const rules = sh(host.ns, 'ip rule show');
      expect(rules).not.toMatch(/10\.0\.64\.11\b/);
      expect(rules).toMatch(/111:\s+from 10\.0\.64\.10 lookup 11/);
      // the kept attachment still passes CHECK; GC again changes nothing
      expect((await runPlugin(plugin, { about: 't' }, { env: env('CHECK', 'keep0001'), stdin: conf('1.1.0') })).exitCode).toBe(0);
      expect(
        (await runPlugin(plugin, { about: 't' }, { env: gcEnv, stdin: gcConf([{ containerID: 'keep0001', ifname: 'eth0' }]) })).exitCode,
      ).toBe(0);
      expect(pool.used.size).toBe(1);
      // the IP GC freed is handed out again
      const again = await runPlugin(plugin, { about: 't' }, { env: env('ADD', 'new00003'), stdin: conf('1.1.0') });
      expect(JSON.parse(again.stdout).ips[0].address).toBe('10.0.64.11/18');
    });
  });

  test('GC and STATUS need 1.1.0 (code 1 before); agent unreachable: CHECK 11, GC 11, STATUS 50', async () => {
    await useHostNetns(host.ns, async () => {
      const gcEnv = { CNI_COMMAND: 'GC', CNI_PATH: '/x' };
      for (const v of ['0.3.1', '0.4.0', '1.0.0']) {
        expect(
          JSON.parse(
            (
              await runPlugin(
                plugin,
                { about: 't' },
                { env: gcEnv, stdin: JSON.stringify({ ...JSON.parse(conf(v)), 'cni.dev/valid-attachments': [] }) },
              )
            ).stdout,
          ).code,
        ).toBe(1);
        expect(
          JSON.parse((await runPlugin(plugin, { about: 't' }, { env: { CNI_COMMAND: 'STATUS', CNI_PATH: '/x' }, stdin: conf(v) })).stdout)
            .code,
        ).toBe(1);
      }
      const bad = { cniVersion: '1.1.0', name: 'eni', type: 'x', ipam: { type: 'cilium-eni-ipam', socket: path.join(dir, 'nope.sock') } };
      expect(JSON.parse((await runPlugin(plugin, { about: 't' }, { env: env('CHECK'), stdin: JSON.stringify(bad) })).stdout).code).toBe(11);
      expect(
        JSON.parse(
          (await runPlugin(plugin, { about: 't' }, { env: gcEnv, stdin: JSON.stringify({ ...bad, 'cni.dev/valid-attachments': [] }) }))
            .stdout,
        ).code,
      ).toBe(11);
      expect(
        JSON.parse(
          (await runPlugin(plugin, { about: 't' }, { env: { CNI_COMMAND: 'STATUS', CNI_PATH: '/x' }, stdin: JSON.stringify(bad) })).stdout,
        ).code,
      ).toBe(50);
    });
  });
});
