/**
 * The lab itself, in one boot: markers and exit codes, a failing or hanging scenario not
 * stopping the next, environment and files passed in, the writable places tests need, and the
 * kernel features the Coil and Terway datapaths will use (namespaces, veth, ipvlan, ipip, fou,
 * ip6tnl, dummy, and modules autoloaded on demand: vrf, nftables NAT, iptables MASQUERADE, tbf).
 * The guest also gets the optional user-mode network, to reach a service on the host.
 * Plus the whole-run timeout, which kills qemu during boot (a few seconds, no second boot).
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { LabError, REPO_ROOT, runInLab, summary, type LabResult } from '../lab';

let res: LabResult;
let server: Server;

beforeAll(async () => {
  // A service on the host's loopback, for the guest to reach through the user-mode network.
  server = createServer((_req, reply) => reply.end('hello from the host\n'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  res = await runInLab({
    timeoutMs: 300_000,
    hostNetwork: true,
    env: { LAB_TEST_VALUE: "it's here" },
    files: { 'in/data.txt': 'from the host\n' },
    keepRunDir: true,
    scenarios: [
      {
        name: 'env',
        script:
          'echo "value=$LAB_TEST_VALUE"; echo "cwd=$(pwd)"; echo "node=$("$LAB_NODE" -p process.version)"; cat "$LAB_RUN/in/data.txt"',
      },
      { name: 'fails', script: 'echo before; exit 3' },
      { name: 'no-newline', script: 'printf partial' },
      { name: 'hangs', script: 'echo start; sleep 60', timeoutMs: 2000 },
      {
        name: 'writable',
        script: [
          'touch /tmp/x /run/x /var/run/x /dev/shm/x',
          'echo artifact > "$LAB_RUN/out.txt"',
          '! touch /etc/kernel-lab-must-fail 2>/dev/null',
          'echo ok',
        ].join('\n'),
      },
      {
        name: 'netns-veth',
        script: [
          'ip netns add a; ip netns add b',
          'ip link add va netns a type veth peer name vb netns b',
          'ip -n a addr add 10.9.0.1/24 dev va; ip -n b addr add 10.9.0.2/24 dev vb',
          'ip -n a link set va up; ip -n b link set vb up',
          'ip netns exec a busybox ping -c 1 -W 3 10.9.0.2',
        ].join('\n'),
      },
      {
        name: 'drivers',
        script: [
          'ip link add d0 type dummy',
          'ip link add link d0 name ipv0 type ipvlan mode l2',
          'ip fou add port 5555 ipproto 4',
          'ip link add t4 type ipip remote 10.0.0.2 local 10.0.0.1 encap fou encap-sport auto encap-dport 5555',
          'ip fou add port 5556 ipproto 41 -6',
          'ip link add t6 type ip6tnl remote fd00::2 local fd00::1 mode ip6ip6 encap fou encap-sport auto encap-dport 5556',
          'ip -br link show',
        ].join('\n'),
      },
      {
        name: 'autoload',
        script: [
          'ip link add vrf-blue type vrf table 10',
          'nft add table ip nat',
          "nft 'add chain ip nat post { type nat hook postrouting priority 100; }'",
          'nft add rule ip nat post oifname d0 masquerade',
          'iptables -t nat -A POSTROUTING -s 10.1.0.0/16 -j MASQUERADE',
          'ip link add v0 type veth peer name v1',
          'tc qdisc add dev v0 root tbf rate 10mbit burst 32kb latency 25ms',
          'tc qdisc add dev v0 ingress',
          'ip link add ifb0 type ifb',
          'lsmod | awk \'NR>1 {print $1}\' | sort | tr "\\n" " "',
        ].join('\n'),
      },
      {
        name: 'host-network',
        script: `"$LAB_NODE" -e 'fetch("http://10.0.2.2:${port}/").then(async (r) => console.log(r.status, await r.text()))'`,
        timeoutMs: 60_000,
      },
      {
        name: 'jest',
        jest: { config: 'packages/netlib/jest.config.js', tests: ['packages/netlib/test/tunnel/encoding.test.ts'] },
        timeoutMs: 180_000,
      },
    ],
  });
  process.stderr.write(`${summary(res)}\n`);
});

afterAll(() => {
  server?.close();
  if (res) rmSync(res.runDir, { recursive: true, force: true });
});

const ok = (name: string): string => {
  const s = res.scenario(name);
  if (s.exitCode !== 0) throw new Error(`scenario ${name} exited ${s.exitCode}:\n${s.output}`);
  return s.output;
};

test('runs every scenario in order, each between its markers, and powers off', () => {
  expect(res.scenarios.map((s) => s.name)).toEqual([
    'env',
    'fails',
    'no-newline',
    'hangs',
    'writable',
    'netns-veth',
    'drivers',
    'autoload',
    'host-network',
    'jest',
  ]);
  expect(res.exitCode).toBe(0);
  expect(res.timedOut).toBe(false);
  expect(res.problems).toEqual([]);
  expect(res.bootMs).toBeGreaterThan(0);
});

test('passes env (quoted) and files; runs in the repository with the pinned Node', () => {
  const out = ok('env');
  expect(out).toContain("value=it's here");
  expect(out).toContain(`cwd=${REPO_ROOT}`);
  expect(out).toMatch(/node=v\d+\./);
  expect(out).toContain('from the host');
});

test('reports exit codes and output; a failing scenario does not stop the next', () => {
  expect(res.scenario('fails')).toMatchObject({ exitCode: 3, output: 'before' });
  expect(res.scenario('no-newline')).toMatchObject({ exitCode: 0, output: 'partial' });
});

test('a scenario over its own timeout is killed with exit 124', () => {
  expect(res.scenario('hangs').exitCode).toBe(124);
  expect(res.scenario('hangs').durationMs).toBeLessThan(30_000);
});

test('/tmp, /run (/var/run), /dev/shm and the run directory are writable; the host root is not', () => {
  expect(ok('writable')).toContain('ok');
  expect(readFileSync(join(res.runDir, 'out.txt'), 'utf8')).toBe('artifact\n');
  expect(existsSync('/etc/kernel-lab-must-fail')).toBe(false);
});

test('network namespaces with veth carry traffic', () => {
  expect(ok('netns-veth')).toMatch(/1 packets received/);
});

test('ipvlan, dummy, ipip and ip6tnl over FoU are there (preloaded modules)', () => {
  const out = ok('drivers');
  for (const dev of ['d0', 'ipv0@d0', 't4@NONE', 't6@NONE']) expect(out).toContain(dev);
});

test('other modules load on demand through the host modprobe: vrf, nftables NAT, iptables MASQUERADE, tbf, ifb', () => {
  const out = ok('autoload');
  for (const m of ['vrf', 'nft_chain_nat', 'nft_masq', 'sch_tbf', 'sch_ingress', 'ifb']) expect(out).toContain(m);
});

test('with hostNetwork the guest reaches services on the host loopback at 10.0.2.2', () => {
  expect(ok('host-network')).toContain('200 hello from the host');
});

test('jest runs inside the guest (read-only node_modules, cache in /tmp, swc native binding)', () => {
  expect(ok('jest')).toMatch(/Tests:\s+\d+ passed, \d+ total/);
});

test('the whole-run timeout kills qemu and says so', async () => {
  const t0 = Date.now();
  const err = await runInLab({ timeoutMs: 1500, script: 'sleep 60' }).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(LabError);
  expect((err as Error).message).toMatch(/timed out after 1500 ms/);
  expect(Date.now() - t0).toBeLessThan(20_000);
});
