// The call log: what a plugin appends after each call, and doctor serve's taking of it.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { recordCall, takeCalls } from '../../src/cni/calls';

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'calls-'));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

test("a call appends '<command> <ok> <ms>' to <type>.log; VERSION, an unread config and odd type names are not logged", () => {
  recordCall('veth', 'ADD', true, dir);
  recordCall('veth', 'DEL', false, dir);
  recordCall('veth', 'VERSION', true, dir);
  recordCall(undefined, 'ADD', false, dir);
  recordCall('../etc/x', 'ADD', true, dir);
  expect(fs.readdirSync(dir)).toEqual(['veth.log']);
  const lines = fs.readFileSync(path.join(dir, 'veth.log'), 'utf8').trim().split('\n');
  expect(lines.map((l) => l.split(' ').slice(0, 2).join(' '))).toEqual(['ADD 1', 'DEL 0']);
  // the process's whole life so far, in ms
  const ms = Number(lines[0]!.split(' ')[2]);
  expect(ms).toBeGreaterThan(0);
  expect(ms).toBeLessThanOrEqual(process.uptime() * 1000 + 1);
});

test('without the directory (no doctor serve on the node) nothing is written and nothing throws', () => {
  expect(() => recordCall('veth', 'ADD', true, path.join(dir, 'absent'))).not.toThrow();
  expect(fs.existsSync(path.join(dir, 'absent'))).toBe(false);
});

test('takeCalls: every record of every plugin once, the files emptied; lines that do not parse skipped', () => {
  recordCall('veth', 'ADD', true, dir);
  recordCall('router', 'CHECK', false, dir);
  fs.appendFileSync(path.join(dir, 'router.log'), 'garbage\nDEL 1 12\n');
  const taken = takeCalls(dir).sort((a, b) => a.plugin.localeCompare(b.plugin) || a.command.localeCompare(b.command));
  expect(taken.map(({ ms: _ms, ...r }) => r)).toEqual([
    { plugin: 'router', command: 'CHECK', ok: false },
    { plugin: 'router', command: 'DEL', ok: true },
    { plugin: 'veth', command: 'ADD', ok: true },
  ]);
  expect(taken.find((r) => r.command === 'DEL')!.ms).toBe(12);
  expect(fs.readdirSync(dir)).toEqual([]);
  expect(takeCalls(dir)).toEqual([]);
  expect(takeCalls(path.join(dir, 'absent'))).toEqual([]);
});
