// Issue 5's benchmark and issue 10's `coil` target: one node's coild (built executable, real kube-apiserver
// and coil-ipam-controller), 100 pod ADDs issued at once with the built `coil` binary, then 100 DELs: wall
// time, p50/p99 per ADD, coild's peak RSS, and the ratio of the 100-at-once wall time to 100x one ADD.
// Then the `coil` ADD round trip against the bare runtime start (alternated), and the thin client's raw
// HTTP/2 gRPC against @grpc/grpc-js (one STATUS call each, start-up included).
// Targets (issue 18): 100 ADDs at once <= 3 s, coild's peak RSS <= 80 MiB, the controller's idle RSS <= 80 MiB,
// coil STATUS <= 1.1x bare start; coil ADD <= 1.5x bare start (issue 10). Never fails on timing.
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { alternate, alternateCpu, cpuOnce, median, mib, ms, ratio, table, timeOnce, verdict } from './lib/measure.mjs';
import { POLLS_PER_MINUTE } from './status.mjs';
import { ip, startCoil } from './lib/coil-cluster.mjs';

export const title = 'coil/coild: 100 ADDs at once, then 100 DELs; coil ADD vs bare start; http2 vs grpc-js client';
export const order = 40;

const N = 100;

function coilCmd(ctx, socket, command, netns, id) {
  return {
    file: path.join(ctx.binDir, 'coil'),
    env: {
      CNI_COMMAND: command,
      CNI_CONTAINERID: id,
      CNI_NETNS: netns,
      CNI_IFNAME: 'eth0',
      CNI_PATH: ctx.binDir,
      CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAME=p',
    },
    input: JSON.stringify({ cniVersion: '1.0.0', name: 'k8s-pod-network', type: 'coil', socket }),
  };
}

function runAsync(cmd) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const child = spawn(cmd.file, [], { env: cmd.env, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c) => {
      out += c;
    });
    child.on('error', reject);
    child.on('exit', (code) => {
      const t = Number(process.hrtime.bigint() - t0) / 1e6;
      if (code !== 0) reject(new Error(`coil ${cmd.env.CNI_COMMAND} ${cmd.env.CNI_CONTAINERID} exited ${code}: ${out}`));
      else resolve(t);
    });
    child.stdin.end(cmd.input);
  });
}

async function addHandling(url, method = 'Add') {
  const text = await (await fetch(url)).text();
  const num = (name) => Number(new RegExp(`^${name}\\{[^}]*grpc_method="${method}"[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
  return { sum: num('grpc_server_handling_seconds_sum'), count: num('grpc_server_handling_seconds_count') };
}

/** A field of /proc/<pid>/status in KiB (VmRSS: now, VmHWM: the peak). */
const procKiB = (pid, field) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);

const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil((p / 100) * xs.length) - 1)];

export async function run(ctx) {
  for (const b of ['coil', 'coild', 'coil-ipam-controller']) {
    if (!fs.existsSync(path.join(ctx.binDir, b))) return ctx.skip(`${b} not built (npm run build)`);
  }
  if (process.getuid?.() !== 0) return ctx.skip('needs root (network namespaces)');
  const id = `cbcoil${process.pid.toString(36)}`;
  const nodeNs = `${id}-node`;
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-bench-coil-'));
  const namespaces = [nodeNs];
  const newNs = (n) => {
    ip('netns', 'add', n);
    namespaces.push(n);
    ip('-n', n, 'link', 'set', 'lo', 'up');
    return `/var/run/netns/${n}`;
  };
  let coil;
  try {
    newNs(nodeNs);
    coil = await startCoil({
      root: ctx.root,
      binDir: ctx.binDir,
      work,
      nodeNs,
      pool: { blockSizeBits: 5, subnets: [{ ipv4: '10.140.0.0/16' }] },
    });
    const { socket } = coil;
    const idleRss = procKiB(coil.coild.pid, 'VmRSS');
    const idleAnon = procKiB(coil.coild.pid, 'RssAnon');
    const controllerIdle = procKiB(coil.controller.pid, 'VmRSS');
    const controllerAnon = procKiB(coil.controller.pid, 'RssAnon');
    // A pinned pod keeps the first block, so single ADD/DEL cycles below never request or free a block.
    timeOnce(coilCmd(ctx, socket, 'ADD', newNs(`${id}-pin`), 'pin'));

    // 100 at once.
    const pods = Array.from({ length: N }, (_, i) => newNs(`${id}-p${i}`));
    const t0 = process.hrtime.bigint();
    const addTimes = await Promise.all(pods.map((p, i) => runAsync(coilCmd(ctx, socket, 'ADD', p, `c${i}`))));
    const addWall = Number(process.hrtime.bigint() - t0) / 1e6;
    const delBefore = await addHandling(coil.metricsUrl, 'Del');
    const t1 = process.hrtime.bigint();
    const delTimes = await Promise.all(pods.map((p, i) => runAsync(coilCmd(ctx, socket, 'DEL', p, `c${i}`))));
    const delWall = Number(process.hrtime.bigint() - t1) / 1e6;
    const delAfter = await addHandling(coil.metricsUrl, 'Del');
    const coildDel = ((delAfter.sum - delBefore.sum) / Math.max(1, delAfter.count - delBefore.count)) * 1000;
    const hwm = procKiB(coil.coild.pid, 'VmHWM');
    const controllerPeak = procKiB(coil.controller.pid, 'VmHWM');

    // One ADD at a time (each followed by an untimed DEL), alternated with the bare runtime start.
    const single = newNs(`${id}-single`);
    const bare = { file: ctx.node, args: ['-e', '0'], env: {} };
    const addCmd = coilCmd(ctx, socket, 'ADD', single, 'single');
    const delCmd = coilCmd(ctx, socket, 'DEL', single, 'single');
    const pairs = { a: [], b: [], ratios: [] };
    const before = await addHandling(coil.metricsUrl);
    timeOnce(bare);
    for (let i = 0; i < ctx.runs; i++) {
      const tb0 = i % 2 ? timeOnce(bare) : undefined;
      const ta = timeOnce(addCmd);
      timeOnce(delCmd);
      const tb = tb0 ?? timeOnce(bare);
      pairs.a.push(ta);
      pairs.b.push(tb);
      pairs.ratios.push(ta / tb);
    }
    const singleAdd = median(pairs.a);
    const after = await addHandling(coil.metricsUrl);
    // The same pairs as CPU time (perf stat task-clock of the coil process; coild's work is not in it).
    let cpu;
    if (cpuOnce(bare) !== undefined) {
      cpu = { a: [], b: [], ratios: [] };
      for (let i = 0; i < ctx.runs; i++) {
        const tb0 = i % 2 ? cpuOnce(bare) : undefined;
        const ta = cpuOnce(addCmd);
        timeOnce(delCmd);
        const tb = tb0 ?? cpuOnce(bare);
        cpu.a.push(ta);
        cpu.b.push(tb);
        cpu.ratios.push(ta / tb);
      }
    }
    ctx.targets.push({ what: 'coil ADD round trip to coild', limit: 1.5, wall: pairs, cpu });
    const coildAdd = ((after.sum - before.sum) / Math.max(1, after.count - before.count)) * 1000;

    console.log(`  ${N} ADDs at once (one coild, pool blockSizeBits 5: ${Math.ceil(N / 32)}+ blocks requested on the way):`);
    table(
      ['', 'wall', 'p50', 'p99', 'max'],
      [
        [`${N} ADD`, ms(addWall), ms(pct(addTimes, 50)), ms(pct(addTimes, 99)), ms(Math.max(...addTimes))],
        [`${N} DEL`, ms(delWall), ms(pct(delTimes, 50)), ms(pct(delTimes, 99)), ms(Math.max(...delTimes))],
      ],
    );
    console.log(`  coild's own Del handling during the ${N} DELs (mean, queueing on the kernel's RTNL lock included): ${ms(coildDel)}`);
    console.log(`  ${N}-at-once wall / (${N} x single ADD ${ms(singleAdd)}): ${ratio(addWall / (N * singleAdd))}`);
    console.log('  the daemons (issue 18: 100 ADDs at once <= 3 s, coild peak <= 80 MiB, every daemon idle <= 80 MiB):');
    // RssAnon beside VmRSS: the rest is the executable's pages in the page cache (docs/build.md).
    table(
      ['', 'figure', 'of which anonymous', 'target', ''],
      [
        [`${N} ADDs at once`, ms(addWall), '', '<= 3000 ms', verdict(addWall, 3000)],
        ['coild RSS after start-up', mib(idleRss), mib(idleAnon), '<= 80 MiB', verdict(idleRss, 80 * 1024)],
        [`coild peak RSS (VmHWM, ${N} ADDs and DELs)`, mib(hwm), '', '<= 80 MiB', verdict(hwm, 80 * 1024)],
        [
          'coil-ipam-controller RSS after start-up',
          mib(controllerIdle),
          mib(controllerAnon),
          '<= 80 MiB',
          verdict(controllerIdle, 80 * 1024),
        ],
        [`coil-ipam-controller peak RSS (its blocks for ${N} pods)`, mib(controllerPeak), '', '-', ''],
      ],
    );
    console.log(`  coil ADD round trip vs bare start, median of ${ctx.runs} alternated pairs:`);
    table(
      ['', 'median', 'ratio to bare'],
      [
        ['node -e 0', ms(median(pairs.b)), '1.00x'],
        ['coil ADD (+coild work)', ms(singleAdd), `${ratio(median(pairs.ratios))} (target <= 1.5x)`],
      ],
    );
    console.log(
      `  of which coild's own Add handling (grpc_server_handling_seconds, mean): ${ms(coildAdd)}; the client's share: ${ms(singleAdd - coildAdd)} = ${ratio((singleAdd - coildAdd) / median(pairs.b))} of bare`,
    );

    // coil's STATUS (a round trip to coild's health) against the bare start, as containerd runs it on every
    // runtime status poll; then what a node spends on STATUS for a conflist of coil, veth and router.
    const statusCmd = coilCmd(ctx, socket, 'STATUS', '', '');
    statusCmd.input = JSON.stringify({ cniVersion: '1.1.0', name: 'k8s-pod-network', type: 'coil', socket });
    const statusCpu = alternateCpu(statusCmd, bare, ctx.runs);
    ctx.targets.push({ what: 'STATUS coil (asks coild)', limit: 1.1, wall: alternate(statusCmd, bare, ctx.runs), cpu: statusCpu });
    const perPoll = { coil: statusCpu ? median(statusCpu.a) : undefined, ...ctx.statusCpuMs };
    const chain = ['coil', 'veth', 'router'];
    if (chain.every((p) => perPoll[p] !== undefined)) {
      const total = chain.reduce((sum, p) => sum + perPoll[p], 0);
      console.log(
        `  STATUS of a conflist of ${chain.join(', ')} polled every 5 s: ${chain.map((p) => `${p} ${ms(perPoll[p])}`).join(' + ')} = ${ms(total)} of CPU per poll, ${ms(total * POLLS_PER_MINUTE)} of CPU per minute (${((total * POLLS_PER_MINUTE * 100) / 60_000).toFixed(2)} % of one core)`,
      );
    } else console.log('  STATUS of a whole conflist: needs the status section (veth, router) and perf');

    // Client stacks, one STATUS call each, process start included: the `coil` binary (hand-framed HTTP/2),
    // a script on node:http2, a script on @grpc/grpc-js, round-robin.
    const rpc = path.join(import.meta.dirname, 'lib', 'coil-rpc.mjs');
    const stacks = [
      ['coil STATUS (SEA, raw HTTP/2)', statusCmd],
      ['node + node:http2', { file: ctx.node, args: [rpc, 'http2', socket] }],
      ['node + @grpc/grpc-js', { file: ctx.node, args: [rpc, 'grpcjs', socket] }],
      ['node -e 0', bare],
    ];
    const times = stacks.map(() => []);
    for (const [, c] of stacks) timeOnce(c);
    for (let i = 0; i < ctx.runs; i++) stacks.forEach(([, c], j) => times[j].push(timeOnce(c)));
    const bareMed = median(times[3]);
    console.log('  gRPC client start-up + one call (STATUS), round-robin medians:');
    table(
      ['', 'median', 'ratio to bare'],
      stacks.map(([name], j) => [name, ms(median(times[j])), ratio(median(times[j]) / bareMed)]),
    );
  } finally {
    if (coil) await coil.stop().catch((e) => console.log(`  cleanup: ${e.message}`));
    for (const n of namespaces.reverse()) spawnSync('ip', ['netns', 'del', n]);
    fs.rmSync(work, { recursive: true, force: true });
  }
}
