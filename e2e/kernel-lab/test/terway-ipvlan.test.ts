/**
 * Terway's ENI multi-IP ipvlan L2 datapath in the kernel lab (the host kernel has no ipvlan):
 * one boot, one scenario program (scenarios/terway-ipvlan.ts) that wires two pods with the
 * package's code and moves TCP pod <-> pod, node -> pod, pod -> Service and pod -> VPC, then runs
 * the terway CNI handler (ipvlan) against terwayd over gRPC for a third pod.
 */
import { parseResults, runInLab, summary, type LabResult } from '../lab';

let res: LabResult;

beforeAll(async () => {
  res = await runInLab({
    timeoutMs: 300_000,
    scenarios: [{ name: 'terway-ipvlan', entry: 'e2e/kernel-lab/scenarios/terway-ipvlan.ts', timeoutMs: 180_000 }],
  });
  process.stderr.write(`${summary(res)}\n`);
});

test('terway ipvlan L2: pod<->pod, node->pod, pod->Service, pod->VPC; CHECK; repeated ADD; DEL twice; the CNI binary over gRPC; a stale DEL; slave removal; GC and repair', () => {
  const s = res.scenario('terway-ipvlan');
  if (s.exitCode !== 0) throw new Error(`scenario exited ${s.exitCode}:\n${s.output}`);
  const r = parseResults(s.output);
  expect(r.hostSlave).toBe(true);
  expect(r.podLink).toMatch(/ipvlan\s+mode l2 bridge/);
  expect(r.hostSlaveLink).toMatch(/ipvlan\s+mode l2 bridge/);
  expect(r.podRoutes).toMatch(/default via 192\.168\.1\.253 dev eth0/);
  expect(r.podRoutes).toMatch(/10\.96\.0\.0\/12 via 10\.6\.0\.1 dev eth0/);
  expect(r.hostRoute).toMatch(/192\.168\.1\.10 dev ipvl_\d+ scope link/);
  expect(r.filters).toMatch(/match 0a600000\/fff00000 at 16\s+action order 1: mirred \(Ingress Redirect to device ipvl_\d+\) stolen/);
  expect(r.podToPod).toEqual({ peer: '192.168.1.10', got: 'pod-to-pod' });
  expect(r.nodeToPod).toEqual({ peer: '10.6.0.1', got: 'node-to-pod' });
  expect(r.podToService).toEqual({ peer: '192.168.1.10', got: 'pod-to-service' });
  expect(r.podToVpc).toEqual({ peer: '192.168.1.11', got: 'pod-to-vpc' });
  expect(r.checkBroken).toEqual(['host route 192.168.1.10/32 dev ipvl_* is missing']);
  expect(r.delTwice).toBe(true);
  // The terway CNI handler with eniip_virtual_type ipvlan, through terwayd over gRPC.
  expect(r.cniAdd).toEqual([{ address: '192.168.1.12/24', gateway: '192.168.1.253', interface: 0 }]);
  expect(r.cniTraffic).toBe(true);
  // A stale DEL (the old sandbox's, after the pod's new sandbox took the IP) keeps the new one's host route.
  expect(r.staleDel).toEqual({
    route: expect.stringMatching(/^192\.168\.1\.12 dev ipvl_\d+ scope link$/),
    peer: '192.168.1.12',
    leased: true,
  });
  expect(r.cniDel).toBe(true);
  // The last pod's DEL takes the ENI's host slave, its filter and the clsact with it.
  expect(r.lastDelRemovesSlave).toEqual({ slave: false, filters: '', clsact: false });
  // Kernel-driven GC and repair (terwayd's ipvlan mode): a sandbox destroyed without DEL, a stale and a lost route.
  expect(r.gcReleased).toEqual(['default/q1']);
  expect(r.repair).toEqual({
    routesRemoved: [
      expect.stringMatching(/^192\.168\.1\.20\/32 dev ipvl_\d+$/),
      expect.stringMatching(/^192\.168\.1\.99\/32 dev ipvl_\d+$/),
    ],
    routesAdded: [expect.stringMatching(/^192\.168\.1\.21\/32 dev ipvl_\d+$/)],
    slavesRemoved: [],
  });
  expect(r.trafficAfterRepair).toBe(true);
  expect(r.repairRemovesSlave).toEqual({ gc: ['default/q2'], slavesRemoved: 1, filters: '' });
  // terwayd itself (startTerwayd, ipvlan): GC frees the pod gone without DEL and removes the ENI's host slave.
  expect(r.terwaydGc).toEqual({ released: ['default/r1'], slaveLeft: false });
});
