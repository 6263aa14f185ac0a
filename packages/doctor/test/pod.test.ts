// doctor pod: the verdict from the evidence, each explanation in its turn, and the text people read.
import { diagnose, formatPod, type PodEvidence, type PodFacts } from '../src/pod';
import type { NodeRow } from '../src/node/join';

const pod: PodFacts = {
  namespace: 'default',
  name: 'web',
  uid: 'u1',
  nodeName: 'kl-a',
  phase: 'Pending',
  ips: [],
  waiting: ['app: ContainerCreating'],
};
const none: PodEvidence = { pod, events: [], status: { network: 'k8s-pod-network', plugins: [{ type: 'coil', ok: true }] }, sandboxes: [] };
const row = (state: NodeRow['state'], problems: string[] = []): NodeRow => ({
  containerId: 'sb1',
  pod: 'default/web',
  sandbox: 'ready',
  state,
  objects: ['cache k8s-pod-network/eth0 10.1.0.2'],
  problems,
});
const failedAdd = {
  type: 'Warning',
  reason: 'FailedCreatePodSandBox',
  message:
    'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "sb2": plugin type="multus" failed (add): failed to find plugin "nope"\nmore',
  count: 3,
  last: '2026-11-26T13:00:03Z',
};

test('no pod, or a pod not scheduled: said first', () => {
  expect(diagnose({ ...none, pod: undefined })).toEqual({ ok: false, verdict: 'no such pod' });
  const pending = { ...pod, nodeName: undefined, unschedulable: '0/2 nodes are available: 2 node(s) had untolerated taint' };
  expect(diagnose({ ...none, pod: pending }).verdict).toBe('not scheduled: 0/2 nodes are available: 2 node(s) had untolerated taint');
});

test('a ready sandbox with healthy attachments and an address: ok; with a broken attachment: that problem', () => {
  const ready = {
    ...none,
    pod: { ...pod, phase: 'Running', ips: ['10.1.0.2'] },
    sandboxes: [{ id: 'sb1', state: 'ready' as const, row: row('healthy') }],
  };
  expect(diagnose(ready)).toEqual({ ok: true, verdict: 'has its network: 10.1.0.2 (sandbox sb1)' });
  const broken = {
    ...ready,
    sandboxes: [{ id: 'sb1', state: 'ready' as const, row: row('broken', ['k8s-pod-network/eth0: no host veth']) }],
  };
  expect(diagnose(broken)).toEqual({ ok: false, verdict: 'its network is broken: k8s-pod-network/eth0: no host veth' });
});

test("a plugin failing STATUS comes before the events it causes; then a sandbox being created; then the runtime's CNI error", () => {
  const down = { type: 'coil', ok: false, error: 'code 50: coild is not serving (dial /run/coild.sock: ENOENT)' };
  expect(diagnose({ ...none, events: [failedAdd], status: { plugins: [down] } }).verdict).toBe(
    "the node's network is not ready: coil STATUS fails: code 50: coild is not serving (dial /run/coild.sock: ENOENT)",
  );
  const creating = { ...none, events: [failedAdd], sandboxes: [{ id: 'sb3', state: 'creating' as const }] };
  expect(diagnose(creating).verdict).toBe('its sandbox sb3 is being created: the CNI ADD has not returned yet');
  expect(diagnose({ ...none, events: [failedAdd] }).verdict).toBe(
    'the runtime\'s CNI ADD fails: Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "sb2": plugin type="multus" failed (add): failed to find plugin "nope"',
  );
});

test('nothing explains it yet: the last event is named', () => {
  const scheduled = { type: 'Normal', reason: 'Scheduled', message: 'Successfully assigned default/web to kl-a', count: 1, last: 't' };
  expect(diagnose({ ...none, events: [scheduled] }).verdict).toBe(
    'no network yet, and no CNI error reported (last event: Scheduled: Successfully assigned default/web to kl-a)',
  );
  const text = formatPod('default/web', { ...none, events: [scheduled, failedAdd] }, diagnose({ ...none, events: [failedAdd] }));
  expect(text.split('\n')).toEqual([
    expect.stringMatching(/^default\/web: the runtime's CNI ADD fails: /),
    '  pod: Pending on kl-a',
    '  waiting: app: ContainerCreating',
    '  event: Normal Scheduled (x1, t): Successfully assigned default/web to kl-a',
    expect.stringMatching(
      /^ {2}event: Warning FailedCreatePodSandBox \(x3, 2026-11-26T13:00:03Z\): Failed to create pod sandbox: .*"nope"$/,
    ),
    '  status: k8s-pod-network/coil: ok',
    "  sandbox: none of this pod on this node's runtime",
    '',
  ]);
});
