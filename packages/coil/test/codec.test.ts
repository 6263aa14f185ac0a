import {
  cniErrorFromStatus,
  decodeAddResponse,
  decodeCNIArgs,
  decodeCNIError,
  encodeAddResponse,
  encodeCNIArgs,
  encodeCNIError,
  encodeStatusWithCNIError,
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
  it('rejects truncated input', () => {
    expect(() => decodeCNIArgs(Buffer.from([0x0a, 0x05, 0x61]))).toThrow(RangeError);
  });
});
