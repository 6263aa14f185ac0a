import {
  cniErrorFromStatus,
  decodeAddResponse,
  decodeCNIArgs,
  decodeCNIError,
  encodeAddResponse,
  encodeCNIArgs,
  encodeCNIError,
  encodeStatusWithCNIError,
  frame,
} from '../src/rpc/codec';

describe('pkg.cnirpc codec', () => {
  it('round-trips CNIArgs with maps, repeated fields and bytes', () => {
    const a = {
      containerId: 'abc',
      netns: '/var/run/netns/x',
      ifname: 'eth0',
      args: { K8S_POD_NAME: 'p', K8S_POD_NAMESPACE: 'ns', IS_CHAINED: 'false' },
      path: '/opt/cni/bin',
      stdinData: Buffer.from('{"cniVersion":"1.1.0"}'),
      ips: ['10.1.0.1/32', 'fd00::1/128'],
      interfaces: { eth0: true, net1: false },
    };
    expect(decodeCNIArgs(encodeCNIArgs(a))).toEqual(a);
    expect(decodeCNIArgs(Buffer.alloc(0))).toMatchObject({ containerId: '', args: {}, ips: [] });
  });
  it('matches protobuf wire bytes for a known message', () => {
    // container_id="a" (field 1), ifname="e" (field 3), args{"k":"v"} (field 4 entry)
    expect(encodeCNIArgs({ containerId: 'a', ifname: 'e', args: { k: 'v' } }).toString('hex')).toBe(
      '0a0161' + '1a0165' + '2206' + '0a016b' + '120176',
    );
  });
  it('long strings use multi-byte varint lengths', () => {
    const long = 'x'.repeat(300);
    expect(decodeCNIArgs(encodeCNIArgs({ containerId: long })).containerId).toBe(long);
  });
  it('AddResponse, CNIError and google.rpc.Status details', () => {
    expect(decodeAddResponse(encodeAddResponse('{"ips":[]}')).toString()).toBe('{"ips":[]}');
    const e = { code: 11, msg: 'address pool exhausted', details: 'p: full' };
    expect(decodeCNIError(encodeCNIError(e))).toEqual(e);
    expect(cniErrorFromStatus(encodeStatusWithCNIError(13, 'x', e))).toEqual(e);
    expect(cniErrorFromStatus(Buffer.alloc(0))).toBeUndefined();
  });
  it('frames with a 5-byte prefix', () => {
    expect(frame(Buffer.from([1, 2])).toString('hex')).toBe('00000000020102');
  });
  it('rejects truncated input', () => {
    expect(() => decodeCNIArgs(Buffer.from([0x0a, 0x05, 0x61]))).toThrow(RangeError);
  });
});

describe('hpack', () => {
  // RFC 7541 C.4.1: "www.example.com" Huffman-coded.
  it('decodes the RFC example Huffman string', () => {
    const { huffmanDecodeForTest } = jest.requireActual('../src/rpc/hpack');
    expect(huffmanDecodeForTest(Buffer.from('f1e3c2e5f23a6ba0ab90f4ff', 'hex'))).toBe('www.example.com');
  });
  it('decodes RFC 7541 C.4 requests with the dynamic table', () => {
    const { HpackDecoder } = jest.requireActual('../src/rpc/hpack');
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
    const { HpackDecoder, encodeHeaders } = jest.requireActual('../src/rpc/hpack');
    const h = [
      [':method', 'POST'],
      [':path', '/pkg.cnirpc.CNI/Add'],
      ['content-type', 'application/grpc'],
      ['te', 'trailers'],
      ['x-long', 'y'.repeat(300)],
    ];
    expect(new HpackDecoder().decode(encodeHeaders(h))).toEqual(h);
  });
});
