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
  if (parseInt(prefix.slice(0, 2), 16) & 1) throw new AddressFormatError('MAC prefix', 'a unicast prefix (first octet even), like "0a:58"', prefix);
  const ip = parseIpValue(ipv4);
  if (ip.family !== 4) throw new AddressFormatError('IPv4 address', 'dotted IPv4 like "10.1.0.5"', ipv4);
  const hex = formatIp(ip.value, 4)
    .split('.')
    .map((o) => Number(o).toString(16).padStart(2, '0'))
    .join(':');
  return `${prefix.toLowerCase()}:${hex}`;
}
