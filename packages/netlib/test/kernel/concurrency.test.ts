/** Many operations at once on one namespace, as a node daemon issues them: no EBUSY from overlapping dumps. */
import { link, route, rule } from '@cnikit/netlib';
import { newNs, type TestNs } from '@cnikit/netlib-testing';

let t: TestNs;
beforeEach(() => {
  t = newNs('nlc');
});
afterEach(() => t.cleanup());

it('50 concurrent dumps and writes on one socket all succeed', async () => {
  await link.add(t.ns, { name: 'br0', kind: 'bridge' });
  await link.setUp(t.ns, 'br0');
  const br = await link.get(t.ns, 'br0');
  const ops: Promise<unknown>[] = [];
  for (let i = 0; i < 50; i++) {
    ops.push(link.list(t.ns), route.list(t.ns, { family: 4 }), rule.list(t.ns, 4));
    ops.push(route.add(t.ns, { dst: `10.9.${i}.0/24`, family: 4, oif: br.index, scope: 253 }));
  }
  await Promise.all(ops);
  const routes = await route.list(t.ns, { family: 4 });
  expect(routes.filter((r) => r.dst.startsWith('10.9.'))).toHaveLength(50);
});
