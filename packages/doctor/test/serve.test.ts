// doctor serve: what each round sets in the metrics, from node sources, STATUS answers and the call log; a source
// that cannot be read counts an error and leaves the others current.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { recordCall } from '@cnikit/netlib';
import type { NodeSources } from '../src/node/join';
import { NodeMetrics, round } from '../src/serve';
import { healthyNode } from './support';

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'doctor-serve-'));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

const lines = async (m: NodeMetrics, name: string): Promise<string[]> =>
  (await m.registry.metrics()).split('\n').filter((l) => l.startsWith(name));

// pod web's attachment, and a lease a gone container left
const sources: NodeSources = {
  ...healthyNode(),
  leases: [...healthyNode().leases, { network: 'macvlan-veth', ip: '10.9.0.6', containerId: 'gone', ifName: 'net1' }],
};

test('observeNode: attachments by state (zeros included), by plugin of their chain, leaked objects by kind', async () => {
  const m = new NodeMetrics();
  m.observeNode(sources);
  expect(await lines(m, 'cnikit_attachments{')).toEqual([
    'cnikit_attachments{state="healthy"} 1',
    'cnikit_attachments{state="leaked"} 1',
    'cnikit_attachments{state="broken"} 0',
    'cnikit_attachments{state="conflicting"} 0',
  ]);
  expect(await lines(m, 'cnikit_plugin_attachments{')).toEqual([
    'cnikit_plugin_attachments{plugin="macvlan"} 1',
    'cnikit_plugin_attachments{plugin="veth"} 1',
  ]);
  expect(await lines(m, 'cnikit_leaked_objects{')).toEqual([
    'cnikit_leaked_objects{kind="cache"} 0',
    'cnikit_leaked_objects{kind="lease"} 1',
    'cnikit_leaked_objects{kind="veth"} 0',
    'cnikit_leaked_objects{kind="coil"} 0',
    'cnikit_leaked_objects{kind="router"} 0',
    'cnikit_leaked_objects{kind="terway"} 0',
    'cnikit_leaked_objects{kind="gcp-ipam"} 0',
    'cnikit_leaked_objects{kind="cilium-eni"} 0',
  ]);
});

test('a round: the call log into histograms, STATUS of the used network, and an unreadable runtime counted', async () => {
  const calls = path.join(dir, 'calls');
  fs.mkdirSync(calls);
  recordCall('veth', 'ADD', true, calls);
  recordCall('veth', 'ADD', false, calls);
  const confDir = path.join(dir, 'net.d');
  fs.mkdirSync(confDir);
  fs.writeFileSync(path.join(confDir, '10-x.conflist'), JSON.stringify({ cniVersion: '1.1.0', name: 'x', plugins: [{ type: 'nope' }] }));
  const m = new NodeMetrics();
  const o = {
    criSocket: path.join(dir, 'no.sock'),
    cacheDirs: [],
    hostLocalDir: dir,
    confDir,
    binDirs: [dir],
    callLogDir: calls,
    gc: false,
  };
  await round(m, o);
  expect(await lines(m, 'cnikit_cni_call_duration_seconds_count')).toEqual([
    'cnikit_cni_call_duration_seconds_count{plugin="veth",command="ADD",result="ok"} 1',
    'cnikit_cni_call_duration_seconds_count{plugin="veth",command="ADD",result="error"} 1',
  ]);
  expect(await lines(m, 'cnikit_status_ok{')).toEqual(['cnikit_status_ok{network="x",plugin="nope"} 0']);
  expect(await lines(m, 'cnikit_status_failures_total{')).toEqual(['cnikit_status_failures_total{network="x",plugin="nope"} 1']);
  expect(await lines(m, 'cnikit_doctor_round_errors_total{')).toEqual(['cnikit_doctor_round_errors_total{source="node"} 1']);
  await round(m, o);
  // the log was taken once; STATUS failed again
  expect(await lines(m, 'cnikit_cni_call_duration_seconds_count{plugin="veth",command="ADD",result="ok"}')).toEqual([
    'cnikit_cni_call_duration_seconds_count{plugin="veth",command="ADD",result="ok"} 1',
  ]);
  expect(await lines(m, 'cnikit_status_failures_total{')).toEqual(['cnikit_status_failures_total{network="x",plugin="nope"} 2']);
});
