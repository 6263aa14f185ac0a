import { createHash } from 'node:crypto';
import { hostVethMac } from '../src/names';
import { sha256 } from '../src/sha256';

describe('sha256 (own implementation, kept off node:crypto for start-up time)', () => {
  // Lengths around the padding boundaries (55/56/64 bytes), several blocks, multi-byte UTF-8.
  const inputs = [
    '',
    'abc',
    'host:c0123',
    'x'.repeat(55),
    'x'.repeat(56),
    'x'.repeat(63),
    'x'.repeat(64),
    'x'.repeat(1000),
    'é€😀'.repeat(30),
  ];
  it.each(inputs.map((s) => [s.length, s]))('equals node:crypto for a %i-character string', (_len, s) => {
    expect(sha256(s).toString('hex')).toBe(createHash('sha256').update(s).digest('hex'));
  });

  it('gives the same host MAC as the node:crypto version did (pods created before keep theirs)', () => {
    for (const id of ['c0123456789abcdef', 'b9f8e7d6c5b4a3210', 'x']) {
      const h = createHash('sha256').update(`host:${id}`).digest();
      h[0] = (h[0]! & 0xfe) | 0x02;
      expect(hostVethMac(id)).toBe([...h.subarray(0, 6)].map((b) => b.toString(16).padStart(2, '0')).join(':'));
    }
  });
});
