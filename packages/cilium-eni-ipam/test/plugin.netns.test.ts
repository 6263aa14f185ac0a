// The IPAM plugin in-process (runPlugin) against a stand-in agent on a UNIX socket (same protocol, same
// PoolAllocator), with a test "host" netns holding an ENI link (a veth with the ENI's MAC). Root only.
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { runPlugin } from '@cnikit/netlib';
import { newNs, sh, useHostNetns } from '@cnikit/netlib/testing';
import type { AgentReply, AgentRequest } from '../src/agent-client';
import * as plugin from '../src/plugin';
import { PoolAllocator } from '../src/pool';
import type { CiliumNode } from '../src/types';

const VERSIONS = ['0.3.1', '0.4.0', '1.0.0', '1.1.0'];
const MAC = '02:aa:bb:cc:dd:01';
const root = process.getuid?.() === 0;
const d = root ? describe : describe.skip;

function stubAgent(socket: string, pool: PoolAllocator): Promise<net.Server> {
  const srv = net.createServer((s) => {
    let buf = '';
    s.setEncoding('utf8');
    s.on('data', (c: string) => {
      buf += c;
      if (!buf.includes('\n')) return;
      const req = JSON.parse(buf) as AgentRequest;
      let reply: AgentReply;
      try {
        reply = req.op === 'add' ? { ok: true, lease: pool.allocate(req.owner) }
          : req.op === 'del' ? { ok: true, released: pool.release(req.owner) }
            : { ok: true, pool: pool.poolSize, used: pool.used.size, free: pool.freeIps().length };
      } catch (e) { reply = { ok: false, code: 11, msg: (e as Error).message }; }
      s.end(`${JSON.stringify(reply)}\n`);
    });
  });
  return new Promise((r) => srv.listen(socket, () => r(srv)));
}

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
      status: { eni: { enis: { 'eni-1': { id: 'eni-1', mac: MAC, number: 1, subnet: { id: 's', cidr: '10.0.64.0/18' }, vpc: { id: 'v', cidrs: ['10.0.0.0/16', '172.16.0.0/16'] } } } } },
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

  const conf = (v: string, extra: Record<string, unknown> = {}) => JSON.stringify({
    cniVersion: v, name: 'eni', type: 'cilium-cni', ipam: { type: 'cilium-eni-ipam', socket: path.join(dir, 'agent.sock'), ...extra },
  });
  const env = (cmd: string, id = 'c0ffee01') => ({ CNI_COMMAND: cmd, CNI_CONTAINERID: id, CNI_NETNS: '/var/run/netns/none', CNI_IFNAME: 'eth0', CNI_PATH: '/nonexistent' });

  test.each(VERSIONS)('[%s] ADD: IP from the pool, ENI MAC/number, gateway, VPC routes; rule to the ENI table; DEL removes the rules', async (v) => {
    await useHostNetns(host.ns, async () => {
      const r = await runPlugin(plugin, { about: 't' }, { env: env('ADD'), stdin: conf(v) });
      expect(r.stderr).toBe('');
      expect(r.exitCode).toBe(0);
      const res = JSON.parse(r.stdout);
      expect(res.ips[0].address).toBe('10.0.64.10/18');
      expect(res.ips[0].gateway).toBe('10.0.64.1');
      expect(res.routes).toEqual([{ dst: '10.0.0.0/16', gw: '10.0.64.1' }, { dst: '172.16.0.0/16', gw: '10.0.64.1' }]);
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
  });

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
      const bad = JSON.stringify({ cniVersion: '1.1.0', name: 'eni', type: 'x', ipam: { type: 'cilium-eni-ipam', socket: path.join(dir, 'nope.sock') } });
      expect(JSON.parse((await runPlugin(plugin, { about: 't' }, { env: env('ADD'), stdin: bad })).stdout).code).toBe(11);
      expect(JSON.parse((await runPlugin(plugin, { about: 't' }, { env: { CNI_COMMAND: 'STATUS', CNI_PATH: '/x' }, stdin: bad })).stdout).code).toBe(50);
      expect((await runPlugin(plugin, { about: 't' }, { env: { CNI_COMMAND: 'STATUS', CNI_PATH: '/x' }, stdin: conf('1.1.0') })).exitCode).toBe(0);
      const r = await runPlugin(plugin, { about: 't' }, { env: env('ADD'), stdin: conf('1.1.0', { 'table-offset': -1 }) });
      expect(JSON.parse(r.stdout)).toMatchObject({ code: 7, msg: expect.stringContaining('ipam.table-offset') });
    });
  });
});
