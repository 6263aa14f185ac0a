/**
 * The terway binary's hand-written codec against proto-loader (what terwayd's grpc-js server speaks):
 * requests it encodes decode on the server as sent, and replies the server encodes decode here to the
 * very objects proto-loader makes of them, defaults and absent messages included; and terwayd's side the
 * other way round: requests proto-loader encodes decode to what proto-loader decodes, replies terwayd
 * encodes are the bytes protobufjs makes of the same objects and decode back to them.
 */
import * as codec from '../src/rpc/codec';
import { terwayService } from './grpc-descriptors';
import type { AllocIPReply, GetInfoReply, NetConf, PodRef } from '../src/rpc/proto';

const service = terwayService();
const ref: PodRef = {
  K8sPodName: 'web-0',
  K8sPodNamespace: 'default',
  K8sPodInfraContainerId: 'cid-a',
  Netns: '/var/run/netns/x',
  IfName: 'eth0',
};
const ipSet = (IPv4: string, IPv6 = ''): { IPv4: string; IPv6: string } => ({ IPv4, IPv6 });
const fullNetConf: NetConf = {
  BasicInfo: {
    PodIP: ipSet('192.168.0.10', 'fd00::a'),
    PodCIDR: ipSet('192.168.0.0/22'),
    GatewayIP: ipSet('192.168.0.253'),
    ServiceCIDR: ipSet('10.96.0.0/12'),
  },
  ENIInfo: { MAC: '00:16:3e:00:00:01', Trunk: true, Vid: 4094, GatewayIP: ipSet('192.168.0.253', 'fd00::1') },
  Pod: { Ingress: 10_000_000_000, Egress: 1_000_000, NetworkPriority: 'guaranteed' },
  IfName: 'eth0',
  ExtraRoutes: [{ Dst: '100.64.0.0/10' }, { Dst: '' }],
  DefaultRoute: true,
};

/** What the server's serializer makes of `rep`, decoded by ours and by proto-loader. */
function both<T>(method: string, rep: unknown, ours: (b: Buffer) => T): { ours: T; protoLoader: unknown } {
  const def = service[method]!;
  const bytes = def.responseSerialize(rep);
  return { ours: ours(bytes), protoLoader: def.responseDeserialize(bytes) };
}

describe('rpc.TerwayBackend codec vs proto-loader', () => {
  it('requests: PodRef (AllocIP, GetIPInfo), ReleaseIP with Reason, RecordEvent with enums', () => {
    expect(service['AllocIP']!.requestDeserialize(codec.encodePodRef(ref))).toEqual(ref);
    expect(service['GetIPInfo']!.requestDeserialize(codec.encodePodRef({ ...ref, Netns: '', IfName: '' }))).toEqual({
      ...ref,
      Netns: '',
      IfName: '',
    });
    expect(service['ReleaseIP']!.requestDeserialize(codec.encodePodRef({ ...ref, Reason: 'cni del' }))).toEqual({
      ...ref,
      Reason: 'cni del',
    });
    const event = {
      EventTarget: 'EventTargetPod',
      K8sPodName: 'p',
      K8sPodNamespace: 'n',
      EventType: 'EventTypeWarning',
      Reason: 'r',
      Message: 'ü',
    };
    expect(service['RecordEvent']!.requestDeserialize(codec.encodeEventRequest(event))).toEqual(event);
  });

  it('AllocIPReply with every field set, several NetConfs, a 64-bit rate', () => {
    const rep: AllocIPReply = {
      Success: true,
      IPType: 'TypeENIMultiIP',
      IPv4: true,
      IPv6: true,
      NetConfs: [fullNetConf, { ...fullNetConf, IfName: 'eth1' }],
    };
    const r = both('AllocIP', rep, codec.decodeAllocIPReply);
    expect(r.ours).toEqual(r.protoLoader);
    expect(r.ours).toEqual(rep);
  });

  it('GetInfoReply with messages left out: null as proto-loader gives them', () => {
    const sparse = { BasicInfo: { PodIP: ipSet('192.168.0.10') }, ENIInfo: { MAC: 'aa:bb:cc:dd:ee:ff' }, IfName: 'eth0' };
    const rep = { IPType: 'TypeVPCENI', Success: true, NetConfs: [sparse, {}], Error: 'x', ContainerId: 'cid-b' };
    const r = both('GetIPInfo', rep, codec.decodeGetInfoReply);
    expect(r.ours).toEqual(r.protoLoader);
    const ours = r.ours as GetInfoReply;
    expect(ours.NetConfs[0]!.BasicInfo).toEqual({ PodIP: ipSet('192.168.0.10'), PodCIDR: null, GatewayIP: null, ServiceCIDR: null });
    expect(ours.NetConfs[1]).toMatchObject({ BasicInfo: null, ENIInfo: null, Pod: null, ExtraRoutes: [] });
  });

  it('empty replies: every field at its default', () => {
    for (const [method, decode] of [
      ['AllocIP', codec.decodeAllocIPReply],
      ['GetIPInfo', codec.decodeGetInfoReply],
      ['ReleaseIP', codec.decodeReleaseIPReply],
      ['RecordEvent', codec.decodeEventReply],
      ['ListLeases', codec.decodeListLeasesReply],
    ] as const) {
      expect(decode(Buffer.alloc(0))).toEqual(service[method]!.responseDeserialize(Buffer.alloc(0)));
    }
    const r = both('ReleaseIP', { Success: true, IPv6: true }, codec.decodeReleaseIPReply);
    expect(r.ours).toEqual(r.protoLoader);
    const e = both('RecordEvent', { Succeed: true, Error: 'no such pod' }, codec.decodeEventReply);
    expect(e.ours).toEqual(e.protoLoader);
  });

  it('ListLeases: an empty request, a reply of leases with fields left out', () => {
    expect(service['ListLeases']!.requestDeserialize(Buffer.alloc(0))).toEqual({});
    const rep = {
      Leases: [
        {
          K8sPodNamespace: 'default',
          K8sPodName: 'web-0',
          ContainerId: 'cid-a',
          Netns: '/var/run/netns/x',
          IPv4: '192.168.0.10',
          IPv6: 'fd00::a',
        },
        { K8sPodNamespace: 'kube-system', K8sPodName: 'dns', IPv4: '192.168.0.11' },
      ],
    };
    const r = both('ListLeases', rep, codec.decodeListLeasesReply);
    expect(r.ours).toEqual(r.protoLoader);
    expect(r.ours.Leases[1]).toEqual({
      K8sPodNamespace: 'kube-system',
      K8sPodName: 'dns',
      ContainerId: '',
      Netns: '',
      IPv4: '192.168.0.11',
      IPv6: '',
    });
  });

  it('a cut-short reply is an error, not a half-read one', () => {
    const bytes = service['AllocIP']!.responseSerialize({ Success: true, NetConfs: [fullNetConf] });
    expect(() => codec.decodeAllocIPReply(bytes.subarray(0, bytes.length - 3))).toThrow(RangeError);
  });
});

describe("rpc.TerwayBackend codec, terwayd's side, vs proto-loader", () => {
  /** proto-loader's request bytes for `req`, decoded by ours and by proto-loader. */
  const request = <T>(method: string, req: unknown, ours: (b: Buffer) => T): { ours: T; protoLoader: unknown } => {
    const bytes = service[method]!.requestSerialize(req);
    return { ours: ours(bytes), protoLoader: service[method]!.requestDeserialize(bytes) };
  };
  /**
   * proto-loader reads our reply bytes as the bytes protobufjs makes of the same object (which are not the
   * same bytes: protobufjs writes fields set to '' or false, proto3 leaves them out).
   */
  const reply = (method: string, rep: unknown, ours: (r: never) => Buffer): void => {
    const bytes = ours(rep as never);
    expect(service[method]!.responseDeserialize(bytes)).toEqual(
      service[method]!.responseDeserialize(service[method]!.responseSerialize(rep)),
    );
  };

  it('requests: PodRef in full and empty, ReleaseIP with and without Reason, RecordEvent', () => {
    for (const r of [ref, {}, { K8sPodName: 'x', IfName: 'eth1' }]) {
      const a = request('AllocIP', r, codec.decodePodRef);
      expect(a.ours).toEqual(a.protoLoader);
      const g = request('GetIPInfo', r, codec.decodePodRef);
      expect(g.ours).toEqual(g.protoLoader);
      const rel = request('ReleaseIP', r, codec.decodeReleaseIPRequest);
      expect(rel.ours).toEqual(rel.protoLoader);
    }
    const rel = request('ReleaseIP', { ...ref, Reason: 'cni del ü' }, codec.decodeReleaseIPRequest);
    expect(rel.ours).toEqual(rel.protoLoader);
    expect(rel.ours.Reason).toBe('cni del ü');
    for (const e of [
      { EventTarget: 'EventTargetPod', K8sPodName: 'p', K8sPodNamespace: 'n', EventType: 'EventTypeWarning', Reason: 'r', Message: 'm' },
      {},
      { EventTarget: 7, EventType: 1 },
    ]) {
      const ev = request('RecordEvent', e, codec.decodeEventRequest);
      expect(ev.ours).toEqual(ev.protoLoader);
    }
    // the binary's encoder and terwayd's decoder agree
    expect(codec.decodeReleaseIPRequest(codec.encodePodRef({ ...ref, Reason: 'x' }))).toEqual({ ...ref, Reason: 'x' });
  });

  it('replies: every field set, messages left out or null, enums by name and number, 64-bit rates', () => {
    reply(
      'AllocIP',
      { Success: true, IPType: 'TypeENIMultiIP', IPv4: true, IPv6: true, NetConfs: [fullNetConf, { ...fullNetConf, IfName: 'eth1' }] },
      codec.encodeAllocIPReply,
    );
    reply(
      'AllocIP',
      { Success: true, IPType: 1, NetConfs: [{}, { BasicInfo: null, ENIInfo: {}, Pod: { Ingress: 2 ** 40 } }] },
      codec.encodeAllocIPReply,
    );
    reply('AllocIP', {}, codec.encodeAllocIPReply);
    const sparse = {
      BasicInfo: { PodIP: ipSet('192.168.0.10'), PodCIDR: null },
      ENIInfo: { MAC: 'aa', GatewayIP: {} },
      IfName: 'eth0',
      ExtraRoutes: [{}],
    };
    reply(
      'GetIPInfo',
      { IPType: 'TypeVPCENI', Success: true, NetConfs: [sparse, {}], Error: 'x', ContainerId: 'cid-b' },
      codec.encodeGetInfoReply,
    );
    reply('GetIPInfo', { Success: false, Error: 'no address can be had now: ü' }, codec.encodeGetInfoReply);
    reply('ReleaseIP', { Success: true, IPv4: true, IPv6: false }, codec.encodeReleaseIPReply);
    reply('ReleaseIP', {}, codec.encodeReleaseIPReply);
    reply('RecordEvent', { Succeed: true, Error: 'no such pod' }, codec.encodeEventReply);
    reply('ListLeases', { Leases: [] }, codec.encodeListLeasesReply);
    reply(
      'ListLeases',
      {
        Leases: [
          { K8sPodNamespace: 'a', K8sPodName: 'b', ContainerId: 'c', Netns: 'd', IPv4: 'e', IPv6: 'f' },
          {},
          { IPv4: '192.168.0.11' },
        ],
      },
      codec.encodeListLeasesReply,
    );
    // what terwayd encodes, the binary reads back as sent
    const rep: AllocIPReply = { Success: true, IPType: 'TypeENIMultiIP', IPv4: true, IPv6: true, NetConfs: [fullNetConf] };
    expect(codec.decodeAllocIPReply(codec.encodeAllocIPReply(rep))).toEqual(rep);
  });
});
