import { HpackDecoder, encodeHeaders, huffmanDecodeForTest } from '../src/hpack';

describe('hpack', () => {
  // RFC 7541 C.4.1: "www.example.com" Huffman-coded.
  it('decodes the RFC example Huffman string', () => {
    expect(huffmanDecodeForTest(Buffer.from('f1e3c2e5f23a6ba0ab90f4ff', 'hex'))).toBe('www.example.com');
  });
  it('decodes RFC 7541 C.4 requests with the dynamic table', () => {
    const d = new HpackDecoder();
    expect(d.decode(Buffer.from('828684418cf1e3c2e5f23a6ba0ab90f4ff', 'hex'))).toEqual([
      [':method', 'GET'],
      [':scheme', 'http'],
      [':path', '/'],
      [':authority', 'www.example.com'],
    ]);
    expect(d.decode(Buffer.from('828684be5886a8eb10649cbf', 'hex'))).toEqual([
      [':method', 'GET'],
      [':scheme', 'http'],
      [':path', '/'],
      [':authority', 'www.example.com'],
      ['cache-control', 'no-cache'],
    ]);
  });
  it('round-trips its own literal encoding', () => {
    const h: [string, string][] = [
      [':method', 'POST'],
      [':path', '/pkg.cnirpc.CNI/Add'],
      ['content-type', 'application/grpc'],
      ['te', 'trailers'],
      ['x-long', 'y'.repeat(300)],
    ];
    expect(new HpackDecoder().decode(encodeHeaders(h))).toEqual(h);
  });
});
