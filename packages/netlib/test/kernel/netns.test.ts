import { readlinkSync, statSync } from 'node:fs';
import { CniCode, NetlinkError, NetnsNotFoundError } from '../../src/errors';
import * as link from '../../src/link';
import { closeAllSockets, execInNetns, hostNetns, openNetns, openNetnsIfPresent, rtnl, runInNetns, sameNetns } from '../../src/netns';
import { ipJson, sh } from '@cnikit/netlib-testing';
import { rejection, thrown, useNamespaces } from './fixture';

const t = useNamespaces();
const threadNs = (): string => readlinkSync('/proc/thread-self/ns/net');
const inode = (path: string): string => `net:[${statSync(path).ino}]`;

describe('netns handles', () => {
  test('openNetns accepts a bare name or a path, and both reach the same namespace', () => {
    const byName = openNetns(t.ctr.name);
    const byPath = openNetns(`/var/run/netns/${t.ctr.name}`);
    try {
      expect(byName.path).toBe(`/var/run/netns/${t.ctr.name}`);
      expect(byName.fd).toBeGreaterThan(2);
      expect(sameNetns(byName, byPath)).toBe(true);
      expect(sameNetns(byName, t.host.ns)).toBe(false);
    } finally {
      byName.close();
      byPath.close();
    }
  });

  test('an absent namespace is NetnsNotFoundError (CNI code 3) with the path', () => {
    const err = thrown(() => openNetns('nlt-does-not-exist'));
    expect(err).toBeInstanceOf(NetnsNotFoundError);
    expect(err.code).toBe(CniCode.UnknownContainer);
    expect(err.path).toBe('/var/run/netns/nlt-does-not-exist');
    expect(thrown(() => openNetns('/proc/999999999/ns/net'))).toBeInstanceOf(NetnsNotFoundError);
  });

  test('openNetnsIfPresent: undefined for an absent namespace or an empty path, the handle otherwise', () => {
    expect(openNetnsIfPresent('nlt-does-not-exist')).toBeUndefined();
    expect(openNetnsIfPresent('')).toBeUndefined();
    const ns = openNetnsIfPresent(t.ctr.ns.path)!;
    try {
      expect(sameNetns(ns, t.ctr.ns)).toBe(true);
    } finally {
      ns.close();
    }
  });

  test('hostNetns is the namespace the thread started in', () => {
    const before = threadNs();
    expect(hostNetns().path).toBe('/proc/thread-self/ns/net');
    expect(hostNetns()).toBe(hostNetns());
    expect(inode('/proc/thread-self/ns/net')).toBe(before);
    runInNetns(t.ctr.ns, () => expect(hostNetns()).toBeDefined());
    expect(threadNs()).toBe(before);
  });

  test('a closed handle throws instead of using a stale fd', () => {
    const ns = openNetns(t.ctr.name);
    ns.close();
    ns.close(); // idempotent
    expect(() => ns.fd).toThrow(/closed/);
    expect(() => runInNetns(ns, () => 1)).toThrow(/closed/);
  });
});

describe('runInNetns', () => {
  test('runs fn inside the namespace and returns to the original one', () => {
    const before = threadNs();
    const inside = runInNetns(t.ctr.ns, threadNs);
    expect(inside).toBe(inode(t.ctr.ns.path));
    expect(inside).not.toBe(before);
    expect(threadNs()).toBe(before);
  });

  test('restores the original namespace when fn throws, and rethrows', () => {
    const before = threadNs();
    const boom = new Error('boom');
    expect(
      thrown(() =>
        runInNetns(t.ctr.ns, () => {
          throw boom;
        }),
      ),
    ).toBe(boom);
    expect(threadNs()).toBe(before);
  });

  test('nests: the inner call returns to the outer namespace', () => {
    const before = threadNs();
    const seen = runInNetns(t.host.ns, () => {
      const inner = runInNetns(t.ctr.ns, threadNs);
      return [inner, threadNs()];
    });
    expect(seen).toEqual([inode(t.ctr.ns.path), inode(t.host.ns.path)]);
    expect(threadNs()).toBe(before);
  });

  test('rejects an async fn (it would resume in the wrong namespace) and still restores', () => {
    const before = threadNs();
    const err = thrown(() => runInNetns(t.ctr.ns, async () => 1));
    expect(err).toBeInstanceOf(TypeError);
    expect(err.message).toMatch(/synchronous/);
    expect(threadNs()).toBe(before);
  });

  test('a file that is not a namespace fails with EINVAL from setns, without moving', () => {
    const before = threadNs();
    const notNs = openNetns('/etc/hostname');
    try {
      const err = thrown(() => runInNetns(notNs, () => 1));
      expect(err.code).toBe('EINVAL');
      expect(err.message).toMatch(/setns into \/etc\/hostname: EINVAL/);
    } finally {
      notNs.close();
    }
    expect(threadNs()).toBe(before);
  });
});

describe('per-namespace sockets', () => {
  test('the same operation through two handles affects two namespaces', async () => {
    await link.add(t.host.ns, { name: 'br-same', kind: 'bridge' });
    await link.add(t.ctr.ns, { name: 'br-same', kind: 'bridge' });
    await link.setMtu(t.host.ns, 'br-same', 1300);
    await link.setMtu(t.ctr.ns, 'br-same', 1200);
    expect(ipJson(t.host.ns, 'link show br-same')[0]!.mtu).toBe(1300);
    expect(ipJson(t.ctr.ns, 'link show br-same')[0]!.mtu).toBe(1200);
    expect((await link.get(t.host.ns, 'br-same')).mtu).toBe(1300);
    expect((await link.get(t.ctr.ns, 'br-same')).mtu).toBe(1200);
  });

  test('rtnl() is the netlink package socket, shared by handles on one namespace', async () => {
    const second = openNetns(t.ctr.name);
    try {
      expect(rtnl(second)).toBe(rtnl(t.ctr.ns));
      expect(rtnl(second)).not.toBe(rtnl(t.host.ns));
      const links = await rtnl(t.ctr.ns).getLinks();
      expect(links.map((l) => l.attrs.ifname)).toEqual(['lo']);
      // Our own requests keep working alongside the package's API on the same socket.
      const [ours, theirs] = await Promise.all([link.list(t.ctr.ns), rtnl(t.ctr.ns).getLinks()]);
      expect(ours.length).toBe(theirs.length);
    } finally {
      second.close();
    }
  });

  test('closing a handle or all sockets does not break later calls', async () => {
    const h = openNetns(t.ctr.name);
    expect((await link.list(h)).map((l) => l.name)).toEqual(['lo']);
    h.close();
    expect((await link.list(t.ctr.ns)).map((l) => l.name)).toEqual(['lo']);
    closeAllSockets();
    expect((await link.get(t.ctr.ns, 'lo')).index).toBe(1);
  });

  test('many concurrent requests on one socket all get their own answers', async () => {
    await link.add(t.ctr.ns, { name: 'br0', kind: 'bridge' });
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => link.get(t.ctr.ns, i % 2 ? 'lo' : 'br0')));
    results.forEach((l, i) => expect(l.name).toBe(i % 2 ? 'lo' : 'br0'));
  });
});

describe('execInNetns', () => {
  test('runs a program inside the namespace and returns its output and status', async () => {
    await link.add(t.ctr.ns, { name: 'br-exec', kind: 'bridge' });
    const r = await execInNetns(t.ctr.ns, 'ip', ['-j', 'link', 'show']);
    expect(r.code).toBe(0);
    expect((JSON.parse(r.stdout) as Array<{ ifname: string }>).map((l) => l.ifname).sort()).toEqual(['br-exec', 'lo']);
    const self = await execInNetns(t.ctr.ns, 'readlink', ['/proc/self/ns/net']);
    expect(self.stdout.trim()).toBe(inode(t.ctr.ns.path));
    const failed = await execInNetns(t.ctr.ns, 'sh', ['-c', 'echo oops >&2; exit 3']);
    expect(failed).toMatchObject({ code: 3, stderr: 'oops\n' });
    const input = await execInNetns(t.ctr.ns, 'cat', [], { input: 'hello' });
    expect(input.stdout).toBe('hello');
    expect(await rejection(execInNetns(t.ctr.ns, '/nonexistent/prog'))).toMatchObject({ code: 'ENOENT' });
  });

  test('sh() from the testing helpers agrees', () => {
    expect(sh(t.ctr.ns, 'readlink /proc/self/ns/net').trim()).toBe(inode(t.ctr.ns.path));
    expect(sh(t.ctr.name, 'echo hi')).toBe('hi\n');
    // A handle that is not an `ip netns` name goes through nsenter on its descriptor.
    const unnamed = openNetns(`/proc/${process.pid}/fd/${t.ctr.ns.fd}`);
    try {
      expect(sh(unnamed, 'readlink /proc/self/ns/net').trim()).toBe(inode(t.ctr.ns.path));
    } finally {
      unnamed.close();
    }
    expect(() => sh(t.ctr.ns, 'exit 4')).toThrow(/exit 4/);
  });

  test('NetlinkError is what kernel calls throw', async () => {
    const err = await rejection(link.del(t.ctr.ns, 'nope0'));
    expect(err).toBeInstanceOf(NetlinkError);
    expect(err.message).toBe('netlink: del link nope0: ENODEV');
  });
});
