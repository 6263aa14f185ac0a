/**
 * The plugin's agent client in both of its ways: on node:net (in-process callers) and on netlib's blocking
 * socket (the plugin binary), against agents in a child process: one that answers the op it was asked,
 * one that answers garbage, one that never answers.
 */
import * as path from 'node:path';
import { serveInTempDir } from '@cnikit/netlib-testing';
import { allowBlockingSockets } from '@cnikit/netlib/unix';
import { agentRequest } from '../src/agent-client';

const AGENTS = `
const net = require('node:net');
const dir = process.argv[1];
const line = (c, f) => { let b = ''; c.on('data', (d) => { b += d; if (b.includes('\\n')) f(JSON.parse(b)); }); };
const held = [];
const servers = {
  'ok.sock': (c) => line(c, (req) => c.end(JSON.stringify({ ok: true, pool: 3, used: req.op === 'status' ? 1 : 2 }))),
  'refuse.sock': (c) => line(c, () => c.end(JSON.stringify({ ok: false, code: 11, msg: 'no free IP' }))),
  'garbage.sock': (c) => line(c, () => c.end('not json')),
  'mute.sock': (c) => void held.push(c),
};
let left = Object.keys(servers).length;
for (const [name, fn] of Object.entries(servers))
  net.createServer(fn).listen(dir + '/' + name, () => --left === 0 && process.stdout.write('ready\\n'));
`;

let dir: string;
let agents: { stop(): Promise<void> };

beforeAll(async () => {
  ({ dir, ...agents } = await serveInTempDir('eni-agent-client-', [process.execPath, '-e', AGENTS]));
});

afterAll(() => agents.stop());

describe.each([
  ['on node:net', false],
  ['on a blocking socket', true],
])('agentRequest %s', (_name, blocking) => {
  beforeAll(() => allowBlockingSockets(blocking));
  afterAll(() => allowBlockingSockets(false));
  const sock = (name: string): string => path.join(dir, name);

  it('sends one JSON line and reads the reply to the end of stream', async () => {
    await expect(agentRequest(sock('ok.sock'), { op: 'status', owner: '' })).resolves.toEqual({ ok: true, pool: 3, used: 1 });
    await expect(agentRequest(sock('ok.sock'), { op: 'add', owner: 'c1/eth0' })).resolves.toEqual({ ok: true, pool: 3, used: 2 });
  });

  it("the agent's refusal is a reply, not an error", async () => {
    await expect(agentRequest(sock('refuse.sock'), { op: 'add', owner: 'c1/eth0' })).resolves.toEqual({
      ok: false,
      code: 11,
      msg: 'no free IP',
    });
  });

  it('a reply that is not JSON: an error quoting it', async () => {
    await expect(agentRequest(sock('garbage.sock'), { op: 'status', owner: '' })).rejects.toThrow(
      `agent ${sock('garbage.sock')}: bad reply "not json"`,
    );
  });

  it('no agent: an error naming the socket', async () => {
    await expect(agentRequest(sock('none.sock'), { op: 'status', owner: '' })).rejects.toThrow(/ENOENT.*none\.sock/);
  });

  it('an agent that never answers: an error after the timeout, not much later', async () => {
    const t0 = Date.now();
    await expect(agentRequest(sock('mute.sock'), { op: 'status', owner: '' }, 300)).rejects.toThrow(
      `agent ${sock('mute.sock')}: no answer in 300 ms`,
    );
    expect(Date.now() - t0).toBeGreaterThanOrEqual(295);
    expect(Date.now() - t0).toBeLessThan(3_000);
  });
});
