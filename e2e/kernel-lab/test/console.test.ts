/** The console parser and result records, without a VM. */
import { ConsoleParser, parseResults } from '../lab';

function parse(text: string): ConsoleParser {
  const p = new ConsoleParser();
  let t = 1000;
  for (const line of text.split('\n')) p.push(line, (t += 10));
  return p;
}

test('splits the console into scenarios by markers, with exit codes and CRs removed', () => {
  const p = parse(
    [
      '@@LAB INIT 1.50\r',
      'kernel noise',
      '@@LAB READY 2.25\r',
      '@@LAB BEGIN a\r',
      'one\r',
      'two\r',
      '@@LAB END a 0\r',
      '@@LAB BEGIN b',
      '@@LAB END b 7',
      '@@LAB EXIT 0 9.1',
    ].join('\n'),
  );
  expect(p.guestReadyUptime).toBe(2.25);
  expect(p.readyAt).toBe(1030);
  expect(p.exitCode).toBe(0);
  expect(p.scenarios).toEqual([
    { name: 'a', exitCode: 0, output: 'one\ntwo', durationMs: 30 },
    { name: 'b', exitCode: 7, output: '', durationMs: 10 },
  ]);
});

test('a marker after output without a newline still ends the scenario', () => {
  const p = parse('@@LAB BEGIN a\nfirst\nno newline@@LAB END a 1');
  expect(p.scenarios[0]).toMatchObject({ exitCode: 1, output: 'first\nno newline' });
});

test('a scenario cut short (no END marker) has exit code null; WARN and FATAL are collected', () => {
  const p = parse('@@LAB WARN insmod x failed\n@@LAB BEGIN a\nhalf\n@@LAB BEGIN b\n@@LAB FATAL mount host root');
  p.finish(null);
  expect(p.scenarios.map((s) => [s.name, s.exitCode, s.output])).toEqual([
    ['a', null, 'half'],
    ['b', null, ''],
  ]);
  expect(p.problems).toEqual(['WARN insmod x failed', 'FATAL mount host root']);
  expect(p.exitCode).toBeNull();
});

test('an END for another name does not close the open scenario', () => {
  const p = parse('@@LAB BEGIN a\n@@LAB END b 0\nstill a\n@@LAB END a 2');
  expect(p.scenarios).toEqual([{ name: 'a', exitCode: 2, output: 'still a', durationMs: 30 }]);
});

test('parseResults reads @@RESULT records by key (last wins), skipping broken ones', () => {
  const out = [
    'x',
    '@@RESULT {"key":"a","value":1}',
    '@@RESULT {"key":"b","value":{"c":[1]}}',
    '@@RESULT {"key":',
    '@@RESULT {"key":"a","value":2}',
  ].join('\n');
  expect(parseResults(out)).toEqual({ a: 2, b: { c: [1] } });
});
