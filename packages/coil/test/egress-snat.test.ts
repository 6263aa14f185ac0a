// The router's SNAT rules: argument and script building (pure), then both backends for real in a
// fresh network namespace of the host (iptables-nft / nft; no tunnel drivers needed): install,
// idempotence, repair after a hand edit, removal.
import { execInNetns } from '@cnikit/netlib';
import { cleanupAll, newNs } from '@cnikit/netlib-testing';
import { ensureSnat, iptablesArgs, nftDigest, nftScript, parseNftTable, readNftTable, removeSnat } from '../src/egress/snat';

const cfg = { uplink: 'eth0', podIPv4: '10.72.49.1', podIPv6: 'FD00:72:0::1' };

describe('pure', () => {
  test("iptables arguments: Coil's rule, /32 and /128", () => {
    expect(iptablesArgs('-A', '10.72.49.1', 4, 'eth0').join(' ')).toBe(
      '-w 5 -t nat -A POSTROUTING ! -s 10.72.49.1/32 -o eth0 -j MASQUERADE',
    );
    expect(iptablesArgs('-C', 'fd00:72::1', 6, 'eth0').join(' ')).toBe(
      '-w 5 -t nat -C POSTROUTING ! -s fd00:72::1/128 -o eth0 -j MASQUERADE',
    );
  });

  test('nft script: one transaction, canonical addresses, digest as the comment', () => {
    const s = nftScript(cfg);
    expect(s.split('\n').slice(0, 3)).toEqual(['table inet coil-egress', 'delete table inet coil-egress', 'table inet coil-egress {']);
    expect(s).toContain('oifname "eth0" ip saddr != 10.72.49.1 masquerade');
    expect(s).toContain('oifname "eth0" ip6 saddr != fd00:72::1 masquerade');
    expect(s).toContain(`comment "${nftDigest(cfg)}"`);
    expect(nftDigest({ ...cfg, podIPv6: undefined })).not.toBe(nftDigest(cfg));
  });

  test('parses nft list output (with and without handles)', () => {
    const text =
      'table inet coil-egress { # handle 4\n\tcomment "coil-egress 0123"\n\tchain postrouting { # handle 1\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\toifname "eth0" ip saddr != 10.72.49.1 masquerade # handle 2\n\t}\n}\n';
    expect(parseNftTable(text)).toEqual({ comment: 'coil-egress 0123', rules: ['oifname "eth0" ip saddr != 10.72.49.1 masquerade'] });
    expect(parseNftTable('table inet coil-egress {\n}\n')).toEqual({ rules: [] });
  });
});

describe('in a network namespace', () => {
  afterEach(() => cleanupAll());

  test('iptables: install once, second call changes nothing, remove leaves no rule', async () => {
    const t = newNs('egs');
    expect(await ensureSnat(t.ns, 'iptables', cfg)).toBe(true);
    expect(await ensureSnat(t.ns, 'iptables', cfg)).toBe(false);
    const v4 = (await execInNetns(t.ns, 'iptables', ['-t', 'nat', '-S', 'POSTROUTING'])).stdout;
    const v6 = (await execInNetns(t.ns, 'ip6tables', ['-t', 'nat', '-S', 'POSTROUTING'])).stdout;
    expect(v4.match(/MASQUERADE/g)).toHaveLength(1);
    expect(v4).toContain('-A POSTROUTING ! -s 10.72.49.1/32 -o eth0 -j MASQUERADE');
    expect(v6).toContain('-A POSTROUTING ! -s fd00:72::1/128 -o eth0 -j MASQUERADE');
    await removeSnat(t.ns, 'iptables', cfg);
    await removeSnat(t.ns, 'iptables', cfg);
    expect((await execInNetns(t.ns, 'iptables', ['-t', 'nat', '-S', 'POSTROUTING'])).stdout).not.toContain('MASQUERADE');
    expect((await execInNetns(t.ns, 'ip6tables', ['-t', 'nat', '-S', 'POSTROUTING'])).stdout).not.toContain('MASQUERADE');
  });

  test('nftables: own table, idempotent, repaired after a rule is deleted by hand, removed', async () => {
    const t = newNs('egs');
    expect(await ensureSnat(t.ns, 'nftables', cfg)).toBe(true);
    expect(await ensureSnat(t.ns, 'nftables', cfg)).toBe(false);
    const cur = await readNftTable(t.ns);
    expect(cur?.comment).toBe(nftDigest(cfg));
    expect(cur?.rules.sort()).toEqual([
      'oifname "eth0" ip saddr != 10.72.49.1 masquerade',
      'oifname "eth0" ip6 saddr != fd00:72::1 masquerade',
    ]);
    // Someone flushes the chain: the next pass puts the rules back.
    expect((await execInNetns(t.ns, 'nft', ['flush', 'chain', 'inet', 'coil-egress', 'postrouting'])).code).toBe(0);
    expect((await readNftTable(t.ns))?.rules).toEqual([]);
    expect(await ensureSnat(t.ns, 'nftables', cfg)).toBe(true);
    expect((await readNftTable(t.ns))?.rules).toHaveLength(2);
    // Another address: replaced in place.
    expect(await ensureSnat(t.ns, 'nftables', { ...cfg, podIPv4: '10.72.49.2' })).toBe(true);
    expect((await readNftTable(t.ns))?.rules).toContain('oifname "eth0" ip saddr != 10.72.49.2 masquerade');
    await removeSnat(t.ns, 'nftables', cfg);
    expect(await readNftTable(t.ns)).toBeUndefined();
    await removeSnat(t.ns, 'nftables', cfg);
  });
});
