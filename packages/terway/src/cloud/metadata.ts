/**
 * The ECS instance metadata service (http://100.100.100.200/latest/meta-data/),
 * base URL overridable (tests use FakeOpenApi's).
 */
export const METADATA_URL = 'http://100.100.100.200';

export interface InstanceMeta {
  instanceId: string;
  regionId: string;
  zoneId: string;
  instanceType: string;
  vswitchId: string;
}

export async function fetchInstanceMeta(base = METADATA_URL, timeoutMs = 5000): Promise<InstanceMeta> {
  const get = async (p: string): Promise<string> => {
    const r = await fetch(`${base.replace(/\/$/, '')}/latest/meta-data/${p}`, { signal: AbortSignal.timeout(timeoutMs) });
    if (!r.ok) throw new Error(`metadata: GET ${p}: HTTP ${r.status}`);
    return (await r.text()).trim();
  };
  const [instanceId, regionId, zoneId, instanceType, vswitchId] = await Promise.all(
    ['instance-id', 'region-id', 'zone-id', 'instance/instance-type', 'vswitch-id'].map(get),
  );
  return { instanceId: instanceId!, regionId: regionId!, zoneId: zoneId!, instanceType: instanceType!, vswitchId: vswitchId! };
}

/** An ENI's IPv6 gateway (`network/interfaces/macs/<mac>/ipv6-gateway`). */
export async function fetchIpv6Gateway(base: string, mac: string, timeoutMs = 5000): Promise<string> {
  const p = `network/interfaces/macs/${mac.toLowerCase()}/ipv6-gateway`;
  const r = await fetch(`${base.replace(/\/$/, '')}/latest/meta-data/${p}`, { signal: AbortSignal.timeout(timeoutMs) });
  if (!r.ok) throw new Error(`metadata: GET ${p}: HTTP ${r.status}`);
  return (await r.text()).trim();
}
