/**
 * Our OpenAPI client (src/cloud/openapi.ts): the V3 signature against a canonical request written out by hand from
 * the documented algorithm and against the emulator's verification; RPC-style flattening; how answers map to
 * CloudError (Code, HTTP status, RequestId) and which are retried.
 */
import { createHash, createHmac } from 'node:crypto';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { FakeOpenApi } from '@cnikit/aliyun-emulator';
import { CloudError } from '../src/cloud';
import { canonicalQuery, flattenParams, percentEncode, sha256Hex, signV3, type SignInput } from '../src/cloud/openapi';
import { cloudFor } from './support';

const EMPTY_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';

/** Fixed inputs: an RPC call with a list, a space, `*` and `~` in its parameters; accept and user-agent are not signed. */
function fixedRequest(host: string): SignInput {
  return {
    method: 'POST',
    path: '/',
    query: { RegionId: 'cn-hangzhou', 'InstanceTypes.1': 'ecs.g6.large', Description: 'a b*c~' },
    headers: {
      host,
      'x-acs-action': 'DescribeInstanceTypes',
      'x-acs-version': '2014-05-26',
      'x-acs-date': '2026-01-02T03:04:05Z',
      'x-acs-signature-nonce': '3f1c0d2b9a8e7f6a5b4c3d2e1f0a9b8c',
      'x-acs-content-sha256': EMPTY_SHA256,
      accept: 'application/json',
      'user-agent': 'test',
    },
    body: '',
  };
}

const CRED = { accessKeyId: 'LTAI-test', accessKeySecret: 'test-secret' };

/** The Alibaba Cloud emulator with one instance type, listening. */
async function startEmulator(): Promise<FakeOpenApi> {
  const api = new FakeOpenApi();
  api.addInstanceType('ecs.g6.large', { eniQuantity: 3, eniPrivateIpAddressQuantity: 6 });
  await api.listen();
  return api;
}
describe('V3 signature (ACS3-HMAC-SHA256)', () => {
  it('builds the documented canonical request, string to sign and Authorization', () => {
    const s = signV3(fixedRequest('ecs.cn-hangzhou.aliyuncs.com'), CRED);
    // Method, CanonicalURI, CanonicalQueryString (sorted, RFC 3986: space %20, * %2A, ~ kept), CanonicalHeaders
    // (lower-case, sorted, `name:value\n` each), SignedHeaders, the hex SHA-256 of the (empty) body.
    const canonical = [
      'POST',
      '/',
      'Description=a%20b%2Ac~&InstanceTypes.1=ecs.g6.large&RegionId=cn-hangzhou',
      'host:ecs.cn-hangzhou.aliyuncs.com\n' +
        'x-acs-action:DescribeInstanceTypes\n' +
        `x-acs-content-sha256:${EMPTY_SHA256}\n` +
        'x-acs-date:2026-01-02T03:04:05Z\n' +
        'x-acs-signature-nonce:3f1c0d2b9a8e7f6a5b4c3d2e1f0a9b8c\n' +
        'x-acs-version:2014-05-26\n',
      'host;x-acs-action;x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version',
      EMPTY_SHA256,
    ].join('\n');
    expect(s.canonicalRequest).toBe(canonical);
    const stringToSign = `ACS3-HMAC-SHA256\n${createHash('sha256').update(canonical).digest('hex')}`;
    expect(s.stringToSign).toBe(stringToSign);
    const signature = createHmac('sha256', 'test-secret').update(stringToSign).digest('hex');
    expect(s.signature).toBe(signature);
    // Pinned (worked out apart, with Python's hmac), so that the signer and this test cannot drift together.
    expect(signature).toBe('28995dbd84dbdbf17e57ff3125296c97681c9095c7d30963433c94b2f4cbd4c2');
    expect(s.authorization).toBe(
      `ACS3-HMAC-SHA256 Credential=LTAI-test,SignedHeaders=host;x-acs-action;x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version,Signature=${signature}`,
    );
  });

  it('encodes as documented and flattens lists and objects the RPC way', () => {
    expect(percentEncode("a b+c*d~e/f!g'h(i)j=k&l")).toBe('a%20b%2Bc%2Ad~e%2Ff%21g%27h%28i%29j%3Dk%26l');
    expect(percentEncode('中')).toBe('%E4%B8%AD');
    expect(canonicalQuery({})).toBe('');
    expect(sha256Hex('')).toBe(EMPTY_SHA256);
    expect(
      flattenParams({
        RegionId: 'cn-hangzhou',
        PrivateIpAddress: ['10.0.0.1', '10.0.0.2'],
        Tag: [
          { Key: 'k1', Value: 'v1' },
          { Key: 'k2', Value: undefined },
        ],
        MaxResults: 10,
        DryRun: false,
        NextToken: undefined,
        Empty: [],
      }),
    ).toEqual({
      RegionId: 'cn-hangzhou',
      'PrivateIpAddress.1': '10.0.0.1',
      'PrivateIpAddress.2': '10.0.0.2',
      'Tag.1.Key': 'k1',
      'Tag.1.Value': 'v1',
      'Tag.2.Key': 'k2',
      MaxResults: '10',
      DryRun: 'false',
    });
  });

  describe('against the emulator', () => {
    let api: FakeOpenApi;
    beforeEach(async () => (api = await startEmulator()));
    afterEach(() => api.close());

    /** POSTs the fixed request as signed, after `tamper` changed what goes out. */
    async function send(tamper: (r: SignInput, auth: string) => [SignInput, string] = (r, a) => [r, a]) {
      const signed = fixedRequest(api.endpoint);
      const [req, auth] = tamper(signed, signV3(signed, CRED).authorization);
      const path = `/?${canonicalQuery(req.query)}`;
      const [host, port] = api.endpoint.split(':');
      return new Promise<{ status: number; body: Record<string, unknown> }>((resolve, reject) => {
        const r = http.request({ host, port, method: 'POST', path, headers: { ...req.headers, authorization: auth } }, (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) as Record<string, unknown> }));
        });
        r.on('error', reject);
        r.end();
      });
    }

    it('accepts the signed request, refuses it tampered with', async () => {
      const ok = await send();
      expect(ok.status).toBe(200);
      expect(ok.body['InstanceTypes']).toEqual({ InstanceType: [expect.objectContaining({ InstanceTypeId: 'ecs.g6.large' })] });
      expect(api.calls.at(-1)).toEqual({
        action: 'DescribeInstanceTypes',
        params: { RegionId: 'cn-hangzhou', 'InstanceTypes.1': 'ecs.g6.large', Description: 'a b*c~' },
      });
      const changedParam = await send((r, a) => [{ ...r, query: { ...r.query, RegionId: 'cn-beijing' } }, a]);
      expect(changedParam).toMatchObject({ status: 400, body: { Code: 'SignatureDoesNotMatch' } });
      const changedAction = await send((r, a) => [{ ...r, headers: { ...r.headers, 'x-acs-action': 'DescribeInstances' } }, a]);
      expect(changedAction).toMatchObject({ status: 400, body: { Code: 'SignatureDoesNotMatch' } });
      // A common header present but left out of SignedHeaders: not a complete V3 signature.
      const partial = await send((r) => {
        const { ['x-acs-signature-nonce']: nonce, ...rest } = r.headers;
        const a = signV3({ ...r, headers: rest }, CRED).authorization;
        return [{ ...r, headers: { ...rest, 'x-acs-signature-nonce': nonce! } }, a];
      });
      expect(partial).toMatchObject({ status: 400, body: { Code: 'IncompleteSignature' } });
      const wrongKey = await send((r, a) => [r, a.replace('Credential=LTAI-test', 'Credential=LTAI-nobody')]);
      expect(wrongKey).toMatchObject({ status: 404, body: { Code: 'InvalidAccessKeyId.NotFound' } });
    });
  });
});

describe('answers as CloudError', () => {
  let api: FakeOpenApi;
  beforeEach(async () => (api = await startEmulator()));
  afterEach(() => api.close());

  it('Throttling is retried (each try reported to onCall), then succeeds', async () => {
    const calls: [string, string][] = [];
    const cloud = cloudFor(api, { retryBaseMs: 5, onCall: (a, _ms, code) => calls.push([a, code]) });
    api.inject('DescribeInstanceTypes', { code: 'Throttling.User', status: 400, times: 2 });
    expect(await cloud.instanceQuota('ecs.g6.large')).toMatchObject({ eniQuantity: 3, ipsPerEni: 6 });
    expect(calls).toEqual([
      ['DescribeInstanceTypes', 'Throttling.User'],
      ['DescribeInstanceTypes', 'Throttling.User'],
      ['DescribeInstanceTypes', ''],
    ]);
  });

  it('a 4xx Code surfaces at once with its HTTP status, RequestId and Message', async () => {
    const cloud = cloudFor(api, { retryBaseMs: 5 });
    api.inject('DescribeInstanceTypes', {
      code: 'Forbidden.RAM',
      status: 403,
      message: 'User not authorized to operate on the specified resource.',
    });
    const e = (await cloud.instanceQuota('ecs.g6.large').catch((x: unknown) => x)) as CloudError;
    expect(e).toBeInstanceOf(CloudError);
    expect(e).toMatchObject({ action: 'DescribeInstanceTypes', code: 'Forbidden.RAM', status: 403, retryable: false });
    expect(e.requestId).toMatch(/^[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}$/);
    expect(e.message).toBe(
      `openapi: DescribeInstanceTypes: Forbidden.RAM: User not authorized to operate on the specified resource. (RequestId ${e.requestId})`,
    );
    expect(api.count('DescribeInstanceTypes')).toBe(1);
  });

  it('a 5xx without a JSON body is HTTP<status> and retried; a dropped kept-alive socket is sent again; an unreachable or silent endpoint a transport code', async () => {
    let n = 0;
    const srv = http.createServer((_req, res) => {
      if (++n === 1) {
        res.writeHead(502, { 'content-type': 'text/html' });
        res.end('<html>Bad Gateway</html>');
      } else if (n === 2) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            RequestId: 'R-2',
            InstanceTypes: { InstanceType: [{ InstanceTypeId: 't', EniQuantity: 2, EniPrivateIpAddressQuantity: 3 }] },
          }),
        );
      } // then: never answers
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const endpoint = `127.0.0.1:${(srv.address() as AddressInfo).port}`;
    try {
      const codes: string[] = [];
      const cloud = cloudFor({ endpoint }, { retryBaseMs: 5, readTimeoutMs: 200, maxRetries: 1, onCall: (_a, _ms, c) => codes.push(c) });
      expect(await cloud.instanceQuota('t')).toMatchObject({ eniQuantity: 2, ipsPerEni: 3 });
      expect(codes).toEqual(['HTTP502', '']);
      const silent = await cloudFor({ endpoint }, { readTimeoutMs: 200, maxRetries: 0 })
        .instanceQuota('t')
        .catch((x: unknown) => x);
      expect(silent).toMatchObject({ code: 'ReadTimeout', status: undefined, retryable: false });
    } finally {
      srv.closeAllConnections();
      await new Promise((r) => srv.close(r));
    }
    // A kept-alive socket that the server drops when it is reused: sent again on a new connection, once.
    const seen = new WeakSet<object>();
    let served = 0;
    const dropper = http.createServer((req, res) => {
      if (seen.has(req.socket)) return void req.socket.destroy();
      seen.add(req.socket);
      served++;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          RequestId: `R-${served}`,
          InstanceTypes: { InstanceType: [{ InstanceTypeId: 't', EniQuantity: 2, EniPrivateIpAddressQuantity: 3 }] },
        }),
      );
    });
    await new Promise<void>((r) => dropper.listen(0, '127.0.0.1', r));
    try {
      const c = cloudFor({ endpoint: `127.0.0.1:${(dropper.address() as AddressInfo).port}` }, { maxRetries: 0 });
      await c.instanceQuota('t');
      await c.instanceQuota('t');
      expect(served).toBe(2);
    } finally {
      dropper.closeAllConnections();
      await new Promise((r) => dropper.close(r));
    }
    const refused = await cloudFor({ endpoint: '127.0.0.1:1' }, { maxRetries: 0 })
      .instanceQuota('t')
      .catch((x: unknown) => x);
    expect(refused).toBeInstanceOf(CloudError);
    expect(refused).toMatchObject({ code: 'ECONNREFUSED', status: undefined, requestId: undefined });
  });
});
