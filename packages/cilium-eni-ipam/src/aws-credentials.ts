/**
 * AWS credentials for the EC2 client, from the sources our deployment uses (config/deploy.yaml): the
 * environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY[/AWS_SESSION_TOKEN], the optional Secret
 * cilium-eni-operator-aws), else the instance role from the instance metadata service (IMDSv2), refreshed
 * before it expires. The AWS SDK's chain had more sources; a configuration that selects one of those is
 * refused by name instead of silently falling through to another identity.
 */
import { existsSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { send } from './http-send';
import type { AwsCredentials } from './sigv4';

export type CredentialSource = () => Promise<AwsCredentials>;

export class CredentialsError extends Error {
  override name = 'CredentialsError';
}

/** Fixed credentials (an emulator takes any). */
export const staticCredentials =
  (c: AwsCredentials): CredentialSource =>
  () =>
    Promise.resolve(c);

/** Sources of the SDK's chain we do not implement: each named by what selects it. */
function refusedSource(env: NodeJS.ProcessEnv): string | undefined {
  if (env.AWS_WEB_IDENTITY_TOKEN_FILE) return 'web identity (IRSA: AWS_WEB_IDENTITY_TOKEN_FILE/AWS_ROLE_ARN)';
  if (env.AWS_CONTAINER_CREDENTIALS_RELATIVE_URI || env.AWS_CONTAINER_CREDENTIALS_FULL_URI)
    return 'container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI/FULL_URI: ECS, EKS Pod Identity)';
  if (env.AWS_PROFILE) return `shared config profiles (AWS_PROFILE=${env.AWS_PROFILE})`;
  const file = env.AWS_SHARED_CREDENTIALS_FILE ?? path.join(os.homedir(), '.aws', 'credentials');
  if (existsSync(file)) return `shared credentials file (${file})`;
  return undefined;
}

/**
 * The source the environment selects. A half-set pair or an unsupported source fails each call (as the SDK's
 * chain did: a client is made without I/O or throwing, the error surfaces as the call's); IMDS is only asked
 * at the first call.
 */
export function defaultCredentials(env: NodeJS.ProcessEnv = process.env): CredentialSource {
  try {
    return selectSource(env);
  } catch (err) {
    return () => Promise.reject(err as Error);
  }
}

function selectSource(env: NodeJS.ProcessEnv): CredentialSource {
  const { AWS_ACCESS_KEY_ID: id, AWS_SECRET_ACCESS_KEY: secret, AWS_SESSION_TOKEN: token } = env;
  if (id && secret) return staticCredentials({ accessKeyId: id, secretAccessKey: secret, sessionToken: token || undefined });
  if (id || secret) throw new CredentialsError(`AWS credentials: ${id ? 'AWS_SECRET_ACCESS_KEY' : 'AWS_ACCESS_KEY_ID'} is not set`);
  const refused = refusedSource(env);
  if (refused)
    throw new CredentialsError(
      `AWS credentials: ${refused} is not supported; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or use the instance role`,
    );
  if (env.AWS_EC2_METADATA_DISABLED === 'true')
    throw new CredentialsError('AWS credentials: none in the environment and AWS_EC2_METADATA_DISABLED=true');
  return imdsCredentials(env.AWS_EC2_METADATA_SERVICE_ENDPOINT ?? 'http://169.254.169.254');
}

/** Refreshed this long before they expire, so that no signed request carries credentials about to lapse. */
const REFRESH_BEFORE_MS = 5 * 60_000;

/** The instance role's credentials from IMDSv2, cached until shortly before their Expiration. */
export function imdsCredentials(endpoint: string, now: () => number = Date.now): CredentialSource {
  let cached: { creds: AwsCredentials; refreshAt: number } | undefined;
  let pending: Promise<AwsCredentials> | undefined;
  return async () => {
    if (cached && now() < cached.refreshAt) return cached.creds;
    // One fetch for every caller waiting at once.
    pending ??= fetchRole(endpoint.replace(/\/$/, ''))
      .then(({ creds, expiration }) => {
        cached = { creds, refreshAt: expiration - REFRESH_BEFORE_MS };
        return creds;
      })
      .finally(() => (pending = undefined));
    return pending;
  };
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
