/**
 * MAC addresses derived from IPv4 addresses, for plugins with a `mac_prefix`
 * option: "0a:58" + 10.1.0.5 -> "0a:58:0a:01:00:05". A stable MAC per IP
 * lets neighbours keep their ARP entries when a pod's veth is recreated.
 */
import { AddressFormatError, formatIp, parseIpValue } from './parse';

const PREFIX_RE = /^[0-9a-fA-F]{2}:[0-9a-fA-F]{2}$/;

/** "xx:xx" + the four octets of `ipv4` in lower-case hex. Throws for a bad prefix, a multicast prefix or a non-IPv4 address. */
export function ipToMacV4(prefix: string, ipv4: string): string {
  if (!PREFIX_RE.test(prefix)) throw new AddressFormatError('MAC prefix', 'two hex octets like "0a:58"', prefix);
  // Bit 0 of the first octet marks a multicast MAC, which no interface may use.
  if (parseInt(prefix.slice(0, 2), 16) & 1)
    throw new AddressFormatError('MAC prefix', 'a unicast prefix (first octet even), like "0a:58"', prefix);
  const ip = parseIpValue(ipv4);
  if (ip.family !== 4) throw new AddressFormatError('IPv4 address', 'dotted IPv4 like "10.1.0.5"', ipv4);
  const hex = formatIp(ip.value, 4)
    .split('.')
    .map((o) => Number(o).toString(16).padStart(2, '0'))
    .join(':');
  return `${prefix.toLowerCase()}:${hex}`;
}

/**
 * The EUI-64 IPv6 link-local address of a MAC (fe80:: + MAC with ff:fe in the
 * middle and the universal/local bit flipped), as the kernel derives it with
 * addr_gen_mode eui64. Used as an IPv6 next hop pinned by a permanent neighbour.
 */
export function linkLocalFromMac(mac: string): string {
  const b = mac.split(':').map((h) => parseInt(h, 16));
  if (b.length !== 6 || b.some((x) => Number.isNaN(x) || x < 0 || x > 255)) throw new TypeError(`invalid MAC ${JSON.stringify(mac)}`);
  const e = [b[0]! ^ 0x02, b[1]!, b[2]!, 0xff, 0xfe, b[3]!, b[4]!, b[5]!];
  const groups = [0, 2, 4, 6].map((i) => ((e[i]! << 8) | e[i + 1]!).toString(16));
  return `fe80::${groups.join(':')}`;
}
