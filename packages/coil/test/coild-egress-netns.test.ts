/**
 * The pod netns lookup coild uses for running pods (host veth IFLA_LINK_NETNSID matched with RTM_GETNSID
 * over /run/netns and /proc), with real namespaces: a "node", pods with a veth to it, decoys without one.
 */
import * as fs from 'node:fs';
import { link, openNetns } from '@cnikit/netlib';
import { newNs, sh } from '@cnikit/netlib-testing';
import { candidateNetnsPaths, findNetnsById, findPeerNetns, nsidOf } from '../src/coild/netns-finder';

const made: { cleanup(): void }[] = [];
afterAll(() => {
  for (const m of made.reverse()) m.cleanup();
});

const sameNs = (a: string, b: string): boolean => {
  const x = fs.statSync(a),
    y = fs.statSync(b);
  return x.dev === y.dev && x.ino === y.ino;
};

it('finds each pod namespace from its host veth; none for a link without a peer namespace', async () => {
  const node = newNs('coilfn');
  made.push(node);
  const pods = [newNs('coilfp'), newNs('coilfp'), newNs('coilfp')];
  made.push(...pods);
  const decoy = newNs('coilfd');
  made.push(decoy);
  pods.forEach((p, i) => sh(node.ns, `ip link add hv${i} type veth peer name eth0 netns ${p.name}`));
  sh(node.ns, 'ip link add dummy0 type bridge');
  const candidates = candidateNetnsPaths();
  expect(candidates.length).toBeGreaterThan(pods.length);
  for (const [i, p] of pods.entries()) {
    const hv = await link.get(node.ns, `hv${i}`);
    expect(hv.linkNetnsId).toBeDefined();
    const found = await findPeerNetns(node.ns, hv.index, candidates);
    expect(found).toBeDefined();
    expect(sameNs(found!, p.ns.path)).toBe(true);
  }
  const dummy = await link.get(node.ns, 'dummy0');
  expect(await findPeerNetns(node.ns, dummy.index, candidates)).toBeUndefined();
  expect(await findPeerNetns(node.ns, 999_999, candidates)).toBeUndefined();
  // A namespace the node has no id for, and an id nobody has.
  const fd = fs.openSync(decoy.ns.path, 'r');
  try {
    expect(await nsidOf(node.ns, fd)).toBeUndefined();
  } finally {
    fs.closeSync(fd);
  }
  expect(await findNetnsById(node.ns, 4242, candidates)).toBeUndefined();
  // Works through /proc too: a process sleeping in a pod namespace whose bind mount is gone.
  const extra = newNs('coilfx');
  sh(node.ns, `ip link add hvx type veth peer name eth0 netns ${extra.name}`);
  const child = require('node:child_process').spawn('ip', ['netns', 'exec', extra.name, 'sleep', '30'], {
    stdio: 'ignore',
  }) as import('node:child_process').ChildProcess;
  try {
    const keep = openNetns(extra.ns.path);
    await new Promise((r) => setTimeout(r, 300));
    extra.cleanup(); // ip netns del: the bind mount goes, the sleeping process keeps the namespace
    const hvx = await link.get(node.ns, 'hvx');
    const found = await findPeerNetns(node.ns, hvx.index);
    expect(found).toMatch(/^\/proc\/\d+\/ns\/net$/);
    const st = fs.fstatSync(keep.fd);
    const f = fs.statSync(found!);
    expect([f.dev, f.ino]).toEqual([st.dev, st.ino]);
    keep.close();
  } finally {
    child.kill('SIGKILL');
  }
});
