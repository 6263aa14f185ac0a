// IRSA (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN) against moto_server's STS: AssumeRoleWithWebIdentity
// unsigned, as AWS takes it, its temporary credentials then signing EC2 calls with their session token.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { defaultCredentials } from '../src/aws-credentials';
import { Ec2QueryClient } from '../src/ec2-query';
import { items } from '../src/xml';
import { startMoto, type Moto } from '@cnikit/cilium-eni-ipam-testing';

let moto: Moto;
let dir: string;
beforeAll(async () => {
  moto = await startMoto();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'irsa-'));
}, 60_000);
afterAll(async () => {
  await moto?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

test('IRSA: the role assumed with the token file, its session credentials sign EC2 calls', async () => {
  const tokenFile = path.join(dir, 'token');
  fs.writeFileSync(tokenFile, 'eyJhbGciOiJSUzI1NiJ9.e30.sig\n');
  const env = {
    AWS_SHARED_CREDENTIALS_FILE: path.join(dir, 'none'),
    AWS_WEB_IDENTITY_TOKEN_FILE: tokenFile,
    AWS_ROLE_ARN: 'arn:aws:iam::123456789012:role/cilium-eni-operator',
    AWS_ROLE_SESSION_NAME: 'op-1',
    AWS_ENDPOINT_URL_STS: moto.endpoint,
  };
  const src = defaultCredentials(env, 'us-east-1');
  const creds = await src();
  expect(creds.accessKeyId).toMatch(/^ASIA/);
  expect(creds.secretAccessKey.length).toBeGreaterThan(10);
  expect(creds.sessionToken).toBeTruthy();
  expect(await src()).toBe(creds); // cached while fresh
  const client = new Ec2QueryClient({ region: 'us-east-1', endpoint: moto.endpoint, credentials: src });
  const r = await client.request('DescribeVpcs', {});
  expect(items(r, 'vpcSet').length).toBeGreaterThan(0); // moto's default VPC
  client.destroy();
});

test('IRSA: STS refusing is an error naming the role and STS code', async () => {
  const src = defaultCredentials(
    {
      AWS_SHARED_CREDENTIALS_FILE: path.join(dir, 'none'),
      AWS_WEB_IDENTITY_TOKEN_FILE: path.join(dir, 'token'),
      AWS_ROLE_ARN: 'not-an-arn',
      AWS_ENDPOINT_URL_STS: `${moto.endpoint}/nowhere/`,
    },
    'us-east-1',
  );
  await expect(src()).rejects.toThrow(/AssumeRoleWithWebIdentity \(not-an-arn\): /);
});
