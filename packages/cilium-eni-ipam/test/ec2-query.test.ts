// Our EC2 Query API client without moto (which routes by the Authorization header's scope but checks no
// signature): SigV4 against the worked example of AWS's IAM User Guide, the XML reader on EC2-shaped answers,
// the request encoding, error classification through SdkEc2's retries against a stub endpoint, credentials.
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { defaultCredentials, imdsCredentials } from '../src/aws-credentials';
import { Ec2Error, SdkEc2 } from '../src/ec2';
import { Ec2QueryClient, Ec2QueryError, errorFromAnswer, filterParams, formBody } from '../src/ec2-query';
import { TokenBucket, errorCode, isRetryable, isThrottle } from '../src/rate-limit';
import { amzDate, canonicalRequest, signV4, signingKey, type SignInput } from '../src/sigv4';
import { items, parseXml, textAt } from '../src/xml';
import { startImds, type Imds } from '@cnikit/cilium-eni-ipam-testing';

// The IAM User Guide's example: GET https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08 signed with
// AKIDEXAMPLE / wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY on 20150830T123600Z in us-east-1 for iam.
const EXAMPLE = {
  creds: { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY' },
  req: {
    method: 'GET',
    host: 'iam.amazonaws.com',
    path: '/',
    query: 'Action=ListUsers&Version=2010-05-08',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded; charset=utf-8' },
    body: '',
  },
  scope: { region: 'us-east-1', service: 'iam', now: new Date('2015-08-30T12:36:00Z') },
};

describe('SigV4', () => {
  test("AWS's worked example: canonical request, its hash, the signing key and the signature", () => {
    const { text, signedHeaders } = canonicalRequest(EXAMPLE.req, {
      ...EXAMPLE.req.headers,
      host: 'iam.amazonaws.com',
      'x-amz-date': '20150830T123600Z',
    });
    expect(text).toBe(
      'GET\n/\nAction=ListUsers&Version=2010-05-08\n' +
        'content-type:application/x-www-form-urlencoded; charset=utf-8\nhost:iam.amazonaws.com\nx-amz-date:20150830T123600Z\n\n' +
        'content-type;host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    );
    expect(signedHeaders).toBe('content-type;host;x-amz-date');
    expect(createHash('sha256').update(text).digest('hex')).toBe('f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59');
    expect(signingKey(EXAMPLE.creds.secretAccessKey, '20150830', 'us-east-1', 'iam').toString('hex')).toBe(
      'c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9',
    );
    expect(amzDate(EXAMPLE.scope.now)).toBe('20150830T123600Z');
    expect(signV4(EXAMPLE.req, EXAMPLE.creds, EXAMPLE.scope)).toEqual({
      'x-amz-date': '20150830T123600Z',
      authorization:
        'AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, SignedHeaders=content-type;host;x-amz-date, ' +
        'Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7',
    });
  });

  test('every input counts: another secret, region, service, second, body or header value is another signature', () => {
    const sig = (o: Partial<SignInput> = {}, s: Partial<typeof EXAMPLE.scope> = {}, secret = EXAMPLE.creds.secretAccessKey) =>
      signV4({ ...EXAMPLE.req, ...o }, { ...EXAMPLE.creds, secretAccessKey: secret }, { ...EXAMPLE.scope, ...s }).authorization;
    const all = [
      sig(),
      sig({}, {}, 'another'),
      sig({}, { region: 'eu-west-1' }),
      sig({}, { service: 'ec2' }),
      sig({}, { now: new Date('2015-08-30T12:36:01Z') }),
      sig({ body: 'Action=ListUsers' }),
      sig({ headers: { 'Content-Type': 'text/plain' } }),
      sig({ query: 'Action=ListUsers&Version=2010-05-09' }),
    ];
    expect(new Set(all).size).toBe(all.length);
    // Header names are case-insensitive and values' spaces folded: the same request, the same signature.
    expect(sig({ headers: { 'content-type': '  application/x-www-form-urlencoded;   charset=utf-8 ' } })).toBe(all[0]);
  });

  test('a session token is sent and signed', () => {
    const h = signV4(EXAMPLE.req, { ...EXAMPLE.creds, sessionToken: 'tok' }, EXAMPLE.scope);
    expect(h['x-amz-security-token']).toBe('tok');
    expect(h.authorization).toContain('SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, ');
    expect(h.authorization).not.toContain('5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7');
  });
});

const ENIS = `<?xml version="1.0" encoding="UTF-8"?>
<DescribeNetworkInterfacesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>fc45294c-example</requestId>
  <networkInterfaceSet>
    <item>
      <networkInterfaceId>eni-0f7db66ef3example</networkInterfaceId>
      <description>cilium &amp; friends &lt;pods&gt; &#x41;&#66; &quot;q&quot; &apos;a&apos;</description>
      <privateIpAddress>10.0.1.10</privateIpAddress>
      <groupSet><item><groupId>sg-1</groupId><groupName>a</groupName></item><item><groupId>sg-2</groupId></item></groupSet>
      <attachment><attachmentId>eni-attach-1</attachmentId><instanceId>i-1</instanceId><deviceIndex>1</deviceIndex></attachment>
      <tagSet><item><key>cluster</key><value>c1</value></item><item><key>empty</key><value/></item></tagSet>
      <privateIpAddressesSet>
        <item><privateIpAddress>10.0.1.10</privateIpAddress><primary>true</primary></item>
        <item><privateIpAddress>10.0.1.11</privateIpAddress><primary>false</primary></item>
      </privateIpAddressesSet>
      <ipv4PrefixSet/>
    </item>
    <item><networkInterfaceId>eni-2</networkInterfaceId><tagSet/></item>
  </networkInterfaceSet>
  <nextToken><![CDATA[page<2>]]></nextToken>
</DescribeNetworkInterfacesResponse>`;

const THROTTLED = (id: string) =>
  `<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>${id}</RequestID></Response>`;

describe('XML reader', () => {
  test('an EC2 answer with nested sets, entities, CDATA, empty elements; namespace and attributes skipped', () => {
    const doc = parseXml(ENIS);
    expect(doc.name).toBe('DescribeNetworkInterfacesResponse');
    const [a, b] = items(doc, 'networkInterfaceSet');
    expect(textAt(a, 'description')).toBe(`cilium & friends <pods> AB "q" 'a'`);
    expect(items(a, 'groupSet').map((g) => textAt(g, 'groupId'))).toEqual(['sg-1', 'sg-2']);
    expect(textAt(a, 'attachment/deviceIndex')).toBe('1');
    expect(items(a, 'tagSet').map((t) => [textAt(t, 'key'), textAt(t, 'value')])).toEqual([
      ['cluster', 'c1'],
      ['empty', ''],
    ]);
    expect(items(a, 'privateIpAddressesSet').length).toBe(2);
    expect(items(a, 'ipv4PrefixSet')).toEqual([]);
    expect(textAt(b, 'networkInterfaceId')).toBe('eni-2');
    expect(textAt(b, 'attachment/instanceId')).toBeUndefined();
    expect(textAt(doc, 'nextToken')).toBe('page<2>');
  });

  test("EC2's error document: code, message, request ID and the status", () => {
    const e = errorFromAnswer(503, THROTTLED('req-1'));
    expect(e).toBeInstanceOf(Ec2QueryError);
    expect({ code: e.code, message: e.message, status: e.status, requestId: e.requestId }).toEqual({
      code: 'RequestLimitExceeded',
      message: 'Request limit exceeded.',
      status: 503,
      requestId: 'req-1',
    });
    // Not XML (a load balancer's page): the status names it.
    expect(errorFromAnswer(502, '<html>bad gateway')).toMatchObject({ code: 'Http502', status: 502 });
  });

  test('malformed documents are errors, not partial answers', () => {
    expect(() => parseXml('<a><b></a>')).toThrow(/closes/);
    expect(() => parseXml('<a>')).toThrow(/not closed/);
    expect(() => parseXml('<a>&nbsp;</a>')).toThrow(/unknown entity/);
    expect(() => parseXml('<a/><b/>')).toThrow(/one root/);
  });
});

describe('request encoding', () => {
  test('lists as EC2 documents them; values RFC 3986-encoded; unset parameters left out', () => {
    expect(
      formBody('DescribeNetworkInterfaces', {
        ...filterParams([
          { name: 'tag:k 1', values: ['a*b', "c'd"] },
          { name: 'status', values: ['available'] },
        ]),
        NextToken: undefined,
      }),
    ).toBe(
      'Action=DescribeNetworkInterfaces&Version=2016-11-15&Filter.1.Name=tag%3Ak%201&Filter.1.Value.1=a%2Ab&Filter.1.Value.2=c%27d' +
        '&Filter.2.Name=status&Filter.2.Value.1=available',
    );
  });
});

/** An EC2 stand-in answering each request with the next scripted (status, body); requests recorded. */
async function stubEc2(answers: [number, string][]) {
  const seen: { headers: http.IncomingHttpHeaders; body: URLSearchParams }[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      seen.push({ headers: req.headers, body: new URLSearchParams(body) });
      const [status, text] = answers.shift() ?? [500, 'script exhausted'];
      res.writeHead(status, { 'content-type': 'text/xml' });
      res.end(text);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { endpoint, seen, close: () => new Promise((r) => server.close(r)) };
}

const fast = (endpoint: string) =>
  new SdkEc2({ endpoint, limiter: new TokenBucket(1000, 1000), retry: { attempts: 4, initialMs: 2, maxMs: 4 } });

describe('errors through SdkEc2', () => {
  test('throttling is retried (counted), then the answer is read; pages follow nextToken', async () => {
    const page2 = ENIS.replace(/<nextToken>.*<\/nextToken>/, '').replace(/eni-0f7db66ef3example/, 'eni-3');
    const stub = await stubEc2([
      [503, THROTTLED('r1')],
      [200, ENIS],
      [500, '<Response><Errors><Error><Code>InternalError</Code><Message>x</Message></Error></Errors></Response>'],
      [200, page2],
    ]);
    try {
      const ec2 = fast(stub.endpoint);
      const enis = await ec2.describeNetworkInterfaces({ ids: ['eni-1', 'eni-2'], tags: { cluster: 'c1' } });
      expect(enis.map((e) => e.id)).toEqual(['eni-0f7db66ef3example', 'eni-2', 'eni-3', 'eni-2']);
      expect(enis[0]).toMatchObject({ ip: '10.0.1.10', addresses: ['10.0.1.11'], securityGroups: ['sg-1', 'sg-2'], deviceIndex: 1 });
      expect(enis[0]!.tags).toEqual({ cluster: 'c1', empty: '' });
      expect(ec2.stats).toMatchObject({ attempts: 4, throttled: 1, retried: 2, failed: 0 });
      const first = stub.seen[0]!;
      expect(Object.fromEntries(first.body)).toEqual({
        Action: 'DescribeNetworkInterfaces',
        Version: '2016-11-15',
        'Filter.1.Name': 'network-interface-id',
        'Filter.1.Value.1': 'eni-1',
        'Filter.1.Value.2': 'eni-2',
        'Filter.2.Name': 'tag:cluster',
        'Filter.2.Value.1': 'c1',
      });
      expect(stub.seen[3]!.body.get('NextToken')).toBe('page<2>');
      expect(first.headers.authorization).toMatch(
        /^AWS4-HMAC-SHA256 Credential=testing\/\d{8}\/us-east-1\/ec2\/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=[0-9a-f]{64}$/,
      );
      ec2.client.destroy();
    } finally {
      await stub.close();
    }
  });

  test('a connection cut in the middle of an answer is a network error, retried', async () => {
    let calls = 0;
    const server = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (calls++ === 0) {
          res.writeHead(200, { 'content-length': '1000' });
          res.write('<DescribeVpcsResponse><vpcSet>');
          setTimeout(() => res.socket?.destroy(), 20);
        } else res.end('<DescribeVpcsResponse><vpcSet><item><vpcId>vpc-1</vpcId></item></vpcSet></DescribeVpcsResponse>');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const ec2 = fast(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
      expect((await ec2.describeVpcs()).map((v) => v.id)).toEqual(['vpc-1']);
      expect(ec2.stats).toMatchObject({ attempts: 2, retried: 1, throttled: 0 });
      ec2.client.destroy();
    } finally {
      await new Promise((r) => server.close(r));
    }
  });

  test('other codes fail at once, surfaced with code, status and request ID', async () => {
    const bad = `<Response><Errors><Error><Code>InvalidSubnetID.NotFound</Code><Message>The subnet ID 'subnet-x' does not exist</Message></Error></Errors><RequestID>req-9</RequestID></Response>`;
    const stub = await stubEc2([[400, bad]]);
    try {
      const ec2 = fast(stub.endpoint);
      const err = (await ec2
        .createNetworkInterface({ subnetId: 'subnet-x', securityGroups: ['sg-1'], description: 'd', tags: {} })
        .catch((e: unknown) => e)) as Ec2Error;
      expect(err).toBeInstanceOf(Ec2Error);
      expect(err.code).toBe('InvalidSubnetID.NotFound');
      expect(err.message).toBe("ec2: CreateNetworkInterface: InvalidSubnetID.NotFound: The subnet ID 'subnet-x' does not exist");
      expect(err.cause).toMatchObject({ status: 400, requestId: 'req-9' });
      expect(ec2.stats).toMatchObject({ attempts: 1, retried: 0, failed: 1 });
      ec2.client.destroy();
    } finally {
      await stub.close();
    }
  });

  test('classification of each kind of failure', () => {
    const e = (code: string, status: number) => new Ec2QueryError(code, 'm', status, 'r');
    expect([isThrottle(e('RequestLimitExceeded', 503)), isRetryable(e('RequestLimitExceeded', 503))]).toEqual([true, true]);
    expect([isThrottle(e('Throttling', 400)), isRetryable(e('Throttling', 400))]).toEqual([true, true]);
    expect(isRetryable(e('Unavailable', 503))).toBe(true);
    expect(isRetryable(e('Http502', 502))).toBe(true);
    expect([isThrottle(e('InsufficientCidrBlocks', 400)), isRetryable(e('InsufficientCidrBlocks', 400))]).toEqual([false, false]);
    expect(isRetryable(e('UnauthorizedOperation', 403))).toBe(false);
    const reset = Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' });
    expect([errorCode(reset), isRetryable(reset)]).toEqual(['ECONNRESET', true]);
    expect(isRetryable(new DOMException('timed out', 'TimeoutError'))).toBe(true);
  });
});

describe('credentials', () => {
  let imds: Imds;
  const role = (exp: string, id = 'ASIAROLE') =>
    JSON.stringify({ Code: 'Success', AccessKeyId: id, SecretAccessKey: 'rolesecret', Token: 'roletoken', Expiration: exp });
  const metadata: Record<string, string> = {
    'iam/security-credentials': 'node-role',
    'iam/security-credentials/node-role': role('2099-01-01T00:00:00Z'),
  };
  beforeAll(async () => {
    imds = await startImds({ '127.0.0.1': metadata });
  });
  afterAll(() => imds.stop());

  test('the environment: both keys (and a session token), a half-set pair is an error naming the missing one', async () => {
    await expect(defaultCredentials({ AWS_ACCESS_KEY_ID: 'A', AWS_SECRET_ACCESS_KEY: 'S', AWS_SESSION_TOKEN: 'T' })()).resolves.toEqual({
      accessKeyId: 'A',
      secretAccessKey: 'S',
      sessionToken: 'T',
    });
    await expect(defaultCredentials({ AWS_ACCESS_KEY_ID: 'A' })()).rejects.toThrow(/AWS_SECRET_ACCESS_KEY is not set/);
  });

  test("the SDK chain's other sources are refused by name, not skipped; IRSA half-configured is an error", async () => {
    const home = fs.mkdtempSync(path.join(os.tmpdir(), 'aws-creds-'));
    const none = { AWS_SHARED_CREDENTIALS_FILE: path.join(home, 'credentials') };
    await expect(defaultCredentials({ ...none, AWS_CONTAINER_CREDENTIALS_FULL_URI: 'http://x' })()).rejects.toThrow(
      /container credentials.*is not supported/,
    );
    await expect(defaultCredentials({ ...none, AWS_PROFILE: 'dev' })()).rejects.toThrow(/AWS_PROFILE=dev/);
    await expect(defaultCredentials({ ...none, AWS_ROLE_ARN: 'arn:aws:iam::123456789012:role/r' })()).rejects.toThrow(
      /IRSA needs AWS_WEB_IDENTITY_TOKEN_FILE too/,
    );
    await expect(defaultCredentials({ ...none, AWS_ROLE_ARN: 'arn', AWS_WEB_IDENTITY_TOKEN_FILE: path.join(home, 't') })()).rejects.toThrow(
      /IRSA token file .*\/t: ENOENT/,
    );
    fs.writeFileSync(none.AWS_SHARED_CREDENTIALS_FILE, '[default]\n');
    await expect(defaultCredentials(none)()).rejects.toThrow(/shared credentials file/);
    fs.rmSync(home, { recursive: true, force: true });
  });

  test('the instance role from IMDSv2, sent with its session token', async () => {
    const src = defaultCredentials({ AWS_SHARED_CREDENTIALS_FILE: '/nonexistent', AWS_EC2_METADATA_SERVICE_ENDPOINT: imds.endpoint });
    const want = { accessKeyId: 'ASIAROLE', secretAccessKey: 'rolesecret', sessionToken: 'roletoken' };
    expect(await src()).toEqual(want);
    const stub = await stubEc2([[200, '<DeleteNetworkInterfaceResponse><return>true</return></DeleteNetworkInterfaceResponse>']]);
    try {
      const client = new Ec2QueryClient({ region: 'eu-west-1', endpoint: stub.endpoint, credentials: src });
      await client.request('DeleteNetworkInterface', { NetworkInterfaceId: 'eni-1' });
      expect(stub.seen[0]!.headers['x-amz-security-token']).toBe('roletoken');
      expect(stub.seen[0]!.headers.authorization).toContain('Credential=ASIAROLE/');
      expect(stub.seen[0]!.headers.authorization).toContain(
        '/eu-west-1/ec2/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token,',
      );
      client.destroy();
    } finally {
      await stub.close();
    }
  });

  test('a role about to expire is fetched again; no role is an error', async () => {
    let now = Date.parse('2099-01-01T00:00:00Z') - 10 * 60_000;
    const src = imdsCredentials(imds.endpoint, () => now);
    await expect(src()).resolves.toMatchObject({ accessKeyId: 'ASIAROLE' });
    metadata['iam/security-credentials/node-role'] = role('2099-01-01T01:00:00Z', 'ASIANEXT'); // the role rotated
    now += 4 * 60_000; // 6 minutes left: still the cached ones
    await expect(src()).resolves.toMatchObject({ accessKeyId: 'ASIAROLE' });
    now += 2 * 60_000; // within 5 minutes of the expiry: fetched again
    await expect(src()).resolves.toMatchObject({ accessKeyId: 'ASIANEXT' });
    const bare = await startImds({ '127.0.0.1': {} });
    await expect(imdsCredentials(bare.endpoint)()).rejects.toThrow(/IMDS: \/latest\/meta-data\/iam\/security-credentials\/: HTTP 404/);
    await bare.stop();
  });
});
