/**
 * AWS credentials for the EC2 client, from the sources our deployment uses (config/deploy.yaml), in the AWS
 * SDK chain's order: the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY[/AWS_SESSION_TOKEN], the
 * optional Secret cilium-eni-operator-aws), IRSA on EKS (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN: STS
 * AssumeRoleWithWebIdentity), else the instance role from the instance metadata service (IMDSv2); temporary
 * ones are refreshed before they expire. The SDK's chain had more sources; a configuration that selects one
 * of those is refused by name instead of silently falling through to another identity.
 */
import { existsSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { errorFromAnswer, formBody } from './ec2-query';
import { send } from './http-send';
import type { AwsCredentials } from './sigv4';
import { textAt, parseXml } from './xml';

export type CredentialSource = () => Promise<AwsCredentials>;

export class CredentialsError extends Error {
  override name = 'CredentialsError';
}

/** Fixed credentials (an emulator takes any). */
export const staticCredentials =
  (c: AwsCredentials): CredentialSource =>
  () =>
    Promise.resolve(c);

/** Shared config and credentials files, which the SDK reads before web identity and IMDS: not implemented. */
function refusedFiles(env: NodeJS.ProcessEnv): string | undefined {
  if (env.AWS_PROFILE) return `shared config profiles (AWS_PROFILE=${env.AWS_PROFILE})`;
  const file = env.AWS_SHARED_CREDENTIALS_FILE ?? path.join(os.homedir(), '.aws', 'credentials');
  if (existsSync(file)) return `shared credentials file (${file})`;
  return undefined;
}

const refuse = (what: string): never => {
  throw new CredentialsError(
    `AWS credentials: ${what} is not supported; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, use IRSA or the instance role`,
  );
};

/**
 * The source the environment selects. A half-set pair or an unsupported source fails each call (as the SDK's
 * chain did: a client is made without I/O or throwing, the error surfaces as the call's); STS and IMDS are
 * only asked at the first call.
 */
export function defaultCredentials(env: NodeJS.ProcessEnv = process.env, region = 'us-east-1'): CredentialSource {
  try {
    return selectSource(env, region);
  } catch (err) {
    return () => Promise.reject(err as Error);
  }
}

function selectSource(env: NodeJS.ProcessEnv, region: string): CredentialSource {
  const { AWS_ACCESS_KEY_ID: id, AWS_SECRET_ACCESS_KEY: secret, AWS_SESSION_TOKEN: token } = env;
  if (id && secret) return staticCredentials({ accessKeyId: id, secretAccessKey: secret, sessionToken: token || undefined });
  if (id || secret) throw new CredentialsError(`AWS credentials: ${id ? 'AWS_SECRET_ACCESS_KEY' : 'AWS_ACCESS_KEY_ID'} is not set`);
  const files = refusedFiles(env);
  if (files) refuse(files);
  if (env.AWS_WEB_IDENTITY_TOKEN_FILE || env.AWS_ROLE_ARN) return webIdentityCredentials(env, region);
  if (env.AWS_CONTAINER_CREDENTIALS_RELATIVE_URI || env.AWS_CONTAINER_CREDENTIALS_FULL_URI)
    refuse('container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI/FULL_URI: ECS, EKS Pod Identity)');
  if (env.AWS_EC2_METADATA_DISABLED === 'true')
    throw new CredentialsError('AWS credentials: none in the environment and AWS_EC2_METADATA_DISABLED=true');
  return imdsCredentials(env.AWS_EC2_METADATA_SERVICE_ENDPOINT ?? 'http://169.254.169.254');
}

/** Refreshed this long before they expire, so that no signed request carries credentials about to lapse. */
const REFRESH_BEFORE_MS = 5 * 60_000;

/** Temporary credentials from `fetchOnce`, cached until shortly before they expire; one fetch for concurrent callers. */
function refreshing(fetchOnce: () => Promise<{ creds: AwsCredentials; expiration: number }>, now: () => number): CredentialSource {
  let cached: { creds: AwsCredentials; refreshAt: number } | undefined;
  let pending: Promise<AwsCredentials> | undefined;
  return async () => {
    if (cached && now() < cached.refreshAt) return cached.creds;
    pending ??= fetchOnce()
      .then(({ creds, expiration }) => {
        cached = { creds, refreshAt: expiration - REFRESH_BEFORE_MS };
        return creds;
      })
      .finally(() => (pending = undefined));
    return pending;
  };
}

/** The instance role's credentials from IMDSv2. */
export const imdsCredentials = (endpoint: string, now: () => number = Date.now): CredentialSource =>
  refreshing(() => fetchRole(endpoint.replace(/\/$/, '')), now);

/**
 * IRSA: the role AWS_ROLE_ARN assumed with the service account token in AWS_WEB_IDENTITY_TOKEN_FILE (re-read at
 * each refresh: the kubelet rotates it), through STS's regional endpoint (AWS_ENDPOINT_URL_STS overrides it).
 */
export function webIdentityCredentials(env: NodeJS.ProcessEnv, region: string, now: () => number = Date.now): CredentialSource {
  const { AWS_WEB_IDENTITY_TOKEN_FILE: tokenFile, AWS_ROLE_ARN: roleArn } = env;
  if (!tokenFile || !roleArn)
    throw new CredentialsError(`AWS credentials: IRSA needs ${tokenFile ? 'AWS_ROLE_ARN' : 'AWS_WEB_IDENTITY_TOKEN_FILE'} too`);
  const endpoint = new URL(env.AWS_ENDPOINT_URL_STS ?? `https://sts.${region}.amazonaws.com${region.startsWith('cn-') ? '.cn' : ''}/`);
  const session = env.AWS_ROLE_SESSION_NAME || `cilium-eni-operator-${now()}`;
  const token = (): string => {
    try {
      return readFileSync(tokenFile, 'utf8').trim();
    } catch (err) {
      throw new CredentialsError(`AWS credentials: IRSA token file ${tokenFile}: ${(err as Error).message}`);
    }
  };
  return refreshing(async () => assumeRoleWithWebIdentity(endpoint, roleArn, session, token()), now);
}

/** STS AssumeRoleWithWebIdentity (Query API, unsigned: the token is the proof). */
async function assumeRoleWithWebIdentity(
  endpoint: URL,
  roleArn: string,
  session: string,
  token: string,
): Promise<{ creds: AwsCredentials; expiration: number }> {
  const params = { RoleArn: roleArn, RoleSessionName: session, WebIdentityToken: token };
  const body = formBody('AssumeRoleWithWebIdentity', params, '2011-06-15');
  const headers = { 'content-type': 'application/x-www-form-urlencoded; charset=utf-8' };
  const r = await send(endpoint, { method: 'POST', headers, body, signal: AbortSignal.timeout(10_000) });
  if (r.status !== 200) {
    const e = errorFromAnswer(r.status, r.body);
    throw new CredentialsError(`AWS credentials from STS AssumeRoleWithWebIdentity (${roleArn}): ${e.code}: ${e.message}`);
  }
  const c = parseXml(r.body).children.find((el) => el.name === 'AssumeRoleWithWebIdentityResult');
  const creds = {
    accessKeyId: textAt(c, 'Credentials/AccessKeyId') ?? '',
    secretAccessKey: textAt(c, 'Credentials/SecretAccessKey') ?? '',
    sessionToken: textAt(c, 'Credentials/SessionToken'),
  };
  if (!creds.accessKeyId || !creds.secretAccessKey) throw new CredentialsError('AWS credentials from STS: no Credentials in the answer');
  return { creds, expiration: Date.parse(textAt(c, 'Credentials/Expiration') ?? '') || Date.now() + 15 * 60_000 };
}

async function imdsGet(url: string, method: string, headers: Record<string, string>): Promise<string> {
  const r = await send(new URL(url), { method, headers, signal: AbortSignal.timeout(2000) });
  if (r.status !== 200) throw new CredentialsError(`AWS credentials from IMDS: ${new URL(url).pathname}: HTTP ${r.status}`);
  return r.body.trim();
}

/** Token (PUT), role name, then that role's JSON document (Code, AccessKeyId, SecretAccessKey, Token, Expiration). */
async function fetchRole(endpoint: string): Promise<{ creds: AwsCredentials; expiration: number }> {
  const token = await imdsGet(`${endpoint}/latest/api/token`, 'PUT', { 'X-aws-ec2-metadata-token-ttl-seconds': '60' });
  const headers = { 'X-aws-ec2-metadata-token': token };
  const base = `${endpoint}/latest/meta-data/iam/security-credentials/`;
  const role = (await imdsGet(base, 'GET', headers)).split('\n')[0]?.trim();
  if (!role) throw new CredentialsError('AWS credentials from IMDS: the instance has no role');
  const doc = JSON.parse(await imdsGet(base + encodeURIComponent(role), 'GET', headers)) as Record<string, string>;
  if ((doc.Code && doc.Code !== 'Success') || !doc.AccessKeyId || !doc.SecretAccessKey)
    throw new CredentialsError(`AWS credentials from IMDS: role ${role}: ${doc.Code ?? 'no AccessKeyId/SecretAccessKey'}`);
  const expiration = doc.Expiration ? Date.parse(doc.Expiration) : NaN;
  return {
    creds: { accessKeyId: doc.AccessKeyId, secretAccessKey: doc.SecretAccessKey, sessionToken: doc.Token || undefined },
    expiration: Number.isFinite(expiration) ? expiration : Date.now() + 15 * 60_000,
  };
}
