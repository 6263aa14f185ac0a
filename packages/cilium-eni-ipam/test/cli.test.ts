// The daemons' command lines (src/cli.ts): defaults, every flag, and the errors for bad ones; the IMDSv2
// lookup against a stand-in metadata server. The mains themselves run in e2e/cilium-eni-ipam/daemons.test.ts.
import { CliError, instanceFromImds, parseAgentFlags, parseOperatorFlags } from '../src/cli';
import { LimitsTable } from '../src/limits';
import { thrownBy } from '@cnikit/netlib-testing';
import { instanceMetadata, startImds, type Imds } from '@cnikit/cilium-eni-ipam-testing';

const cliError = (f: () => unknown): CliError => thrownBy(CliError, f);

describe('cilium-eni-operator flags', () => {
  test("defaults (Cilium's: 4 QPS / burst 20, 50 workers, 180 s release delay, GC every 300 s)", () => {
    const o = parseOperatorFlags([], {});
    expect(o).toMatchObject({
      clusterName: 'default',
      region: 'us-east-1',
      qps: 4,
      burst: 20,
      workers: 50,
      releaseExcess: false,
      excessDelayMs: 180_000,
      gcIntervalMs: 300_000,
      leaderElectionNamespace: 'kube-system',
      installCrd: false,
      metrics: { host: '127.0.0.1', port: 9963 },
    });
    expect(o.ec2Endpoint).toBeUndefined();
    expect(o.kubeconfig).toBeUndefined();
    expect(o.limits.get('m5.large')).toBeDefined();
    expect(parseOperatorFlags([], { AWS_REGION: 'eu-west-1' }).region).toBe('eu-west-1');
  });

  test('every flag', () => {
    const o = parseOperatorFlags(
      [
        '--kubeconfig',
        '/k',
        '--cluster-name',
        'prod',
        '--ec2-endpoint',
        'http://127.0.0.1:5000',
        '--region',
        'ap-south-1',
        '--limit-ipam-api-qps',
        '0.5',
        '--limit-ipam-api-burst',
        '3',
        '--parallel-alloc-workers',
        '7',
        '--aws-release-excess-ips',
        '--excess-ip-release-delay',
        '10',
        '--instance-limits',
        '{"x1.tiny":{"adapters":2,"ipv4":4}}',
        '--eni-gc-interval',
        '0',
        '--leader-election-namespace',
        'cilium',
        '--install-crd',
        '--metrics-address',
        '0.0.0.0:19963',
      ],
      {},
    );
    expect(o).toMatchObject({
      kubeconfig: '/k',
      clusterName: 'prod',
      ec2Endpoint: 'http://127.0.0.1:5000',
      region: 'ap-south-1',
      qps: 0.5,
      burst: 3,
      workers: 7,
      releaseExcess: true,
      excessDelayMs: 10_000,
      gcIntervalMs: 0,
      leaderElectionNamespace: 'cilium',
      installCrd: true,
      metrics: { host: '0.0.0.0', port: 19963 },
    });
    expect(o.limits).toBeInstanceOf(LimitsTable);
    expect(o.limits.get('x1.tiny')).toMatchObject({ adapters: 2, ipv4: 4 });
    expect(parseOperatorFlags(['--metrics-address=[::1]:9000'], {}).metrics).toEqual({ host: '::1', port: 9000 });
  });

  test.each([
    [['--limit-ipam-api-qps', '0'], /--limit-ipam-api-qps.*positive number, got "0"/],
    [['--limit-ipam-api-qps', 'fast'], /--limit-ipam-api-qps.*"fast"/],
    [['--limit-ipam-api-burst', '-1'], /--limit-ipam-api-burst.*non-negative integer, got "-1"/],
    [['--limit-ipam-api-burst', '0'], /--limit-ipam-api-burst.*at least 1/],
    [['--parallel-alloc-workers', '2.5'], /--parallel-alloc-workers.*"2.5"/],
    [['--parallel-alloc-workers', '0'], /--parallel-alloc-workers.*at least 1/],
    [['--excess-ip-release-delay', ''], /--excess-ip-release-delay.*""/],
    [['--eni-gc-interval', '1e'], /--eni-gc-interval/],
    [['--instance-limits', '{nope'], /--instance-limits.*expected JSON/],
    [['--instance-limits', '[1]'], /--instance-limits.*expected an object/],
    [['--metrics-address', '9963'], /--metrics-address.*expected \[host\]:port with a port 0-65535, got "9963"/],
    [['--metrics-address', 'h:99999'], /--metrics-address/],
    [['--ec2-endpoint', 'not a url'], /--ec2-endpoint.*expected a URL/],
    [['--cluster-name', ''], /--cluster-name.*empty/],
    [['--no-such-flag'], /unknown option '--no-such-flag'/],
    [['--limit-ipam-api-qps'], /--limit-ipam-api-qps.*argument missing/],
    [['stray'], /too many arguments|unknown command|excess/i],
  ])('%j is refused: %s', (argv, msg) => {
    const e = cliError(() => parseOperatorFlags(argv as string[], {}));
    expect(e.message).toMatch(msg);
    expect(e.exitCode).toBe(2);
  });

  test('--help is a CliError with exit code 0', () => {
    const write = jest.spyOn(process.stdout, 'write').mockImplementation(() => true);
    try {
      const e = cliError(() => parseOperatorFlags(['--help'], {}));
      expect(e.exitCode).toBe(0);
      expect(write.mock.calls.map((c) => String(c[0])).join('')).toMatch(/--limit-ipam-api-qps/);
    } finally {
      write.mockRestore();
    }
  });
});

describe('cilium-eni-agent flags', () => {
  const inst = ['--instance-id', 'i-1', '--instance-type', 'm5.large', '--vpc-id', 'vpc-1', '--availability-zone', 'us-east-1a'];

  test('defaults: node name from NODE_NAME, the default socket, IMDS when no --instance-id', () => {
    const o = parseAgentFlags([], { NODE_NAME: 'ip-10-0-0-1' });
    expect(o).toMatchObject({ nodeName: 'ip-10-0-0-1', socket: '/run/cilium-eni-ipam/agent.sock', imdsEndpoint: 'http://169.254.169.254' });
    expect(o.instance).toBeUndefined();
    expect(o.ipam).toEqual({
      'pre-allocate': undefined,
      'min-allocate': undefined,
      'max-allocate': undefined,
      'max-above-watermark': undefined,
    });
    expect(o.eni['use-prefix-delegation']).toBeUndefined();
  });

  test('every flag', () => {
    const o = parseAgentFlags(
      [
        '--kubeconfig',
        '/k',
        '--node-name',
        'n1',
        '--socket',
        '/tmp/a.sock',
        '--imds-endpoint',
        'http://127.0.0.1:1338',
        ...inst,
        '--node-subnet-id',
        'subnet-1',
        '--pre-allocate',
        '4',
        '--min-allocate',
        '2',
        '--max-allocate',
        '20',
        '--max-above-watermark',
        '3',
        '--first-interface-index',
        '1',
        '--subnet-tags',
        'pods=a,tier=x=y',
        '--security-groups',
        'sg-1, sg-2',
        '--use-prefix-delegation',
      ],
      {},
    );
    expect(o).toEqual({
      kubeconfig: '/k',
      nodeName: 'n1',
      socket: '/tmp/a.sock',
      imdsEndpoint: 'http://127.0.0.1:1338',
      instance: { instanceId: 'i-1', instanceType: 'm5.large', vpcId: 'vpc-1', availabilityZone: 'us-east-1a', nodeSubnetId: 'subnet-1' },
      ipam: { 'pre-allocate': 4, 'min-allocate': 2, 'max-allocate': 20, 'max-above-watermark': 3 },
      eni: {
        'first-interface-index': 1,
        'subnet-tags': { pods: 'a', tier: 'x=y' },
        'security-groups': ['sg-1', 'sg-2'],
        'use-prefix-delegation': true,
      },
    });
  });

  test.each([
    [['--instance-id', 'i-1'], /--instance-id without IMDS needs --instance-type, --vpc-id, --availability-zone/],
    [['--instance-id', 'i-1', '--instance-type', 'm5.large', '--vpc-id', 'v'], /needs --availability-zone$/],
    [['--vpc-id', 'vpc-1'], /--vpc-id needs --instance-id/],
    [['--pre-allocate', '-2'], /--pre-allocate.*non-negative integer, got "-2"/],
    [['--min-allocate', 'x'], /--min-allocate.*"x"/],
    [['--min-allocate', '10', '--max-allocate', '5'], /--min-allocate 10 is above --max-allocate 5/],
    [['--first-interface-index', '0.5'], /--first-interface-index/],
    [['--subnet-tags', 'pods'], /--subnet-tags.*k=v/],
    [['--subnet-tags', '=a'], /--subnet-tags/],
    [['--security-groups', ','], /--security-groups.*comma-separated list/],
    [['--socket', 'rel.sock'], /--socket.*absolute path/],
    [['--node-name', ''], /--node-name.*empty/],
    [['--imds-endpoint', '169.254.169.254'], /--imds-endpoint.*URL/],
    [['--bogus'], /unknown option '--bogus'/],
  ])('%j is refused: %s', (argv, msg) => {
    const e = cliError(() => parseAgentFlags(argv as string[], { NODE_NAME: 'n' }));
    expect(e.message).toMatch(msg);
    expect(e.exitCode).toBe(2);
  });
});

describe('instanceFromImds (IMDSv2)', () => {
  let imds: Imds;
  beforeAll(async () => {
    const data = instanceMetadata({
      instanceId: 'i-0abc',
      instanceType: 'm5.xlarge',
      availabilityZone: 'us-east-1b',
      mac: '02:11:22:33:44:55',
      vpcId: 'vpc-9',
      subnetId: 'subnet-9',
    });
    imds = await startImds({ '127.0.0.1': data });
  });
  afterAll(() => imds.stop());

  test('token first, then the instance data with it (the VPC and subnet of the primary MAC)', async () => {
    expect(await instanceFromImds(imds.endpoint)).toEqual({
      instanceId: 'i-0abc',
      instanceType: 'm5.xlarge',
      availabilityZone: 'us-east-1b',
      vpcId: 'vpc-9',
      nodeSubnetId: 'subnet-9',
    });
  });

  test('as IMDSv2 answers: no token is 401, a bad TTL is 400; another caller is not this instance: an error naming the path', async () => {
    expect((await fetch(`${imds.endpoint}/latest/meta-data/instance-id`)).status).toBe(401);
    const put = (ttl: string): Promise<Response> =>
      fetch(`${imds.endpoint}/latest/api/token`, { method: 'PUT', headers: { 'X-aws-ec2-metadata-token-ttl-seconds': ttl } });
    expect((await put('0')).status).toBe(400);
    expect((await put('21601')).status).toBe(400);
    const other = await startImds({ '127.0.0.2': {} });
    try {
      await expect(instanceFromImds(other.endpoint)).rejects.toThrow(/IMDS mac: HTTP 404/);
    } finally {
      await other.stop();
    }
  });
});
