/**
 * CIDR math, exported from netlib as the namespace `ip`:
 * `ip.parseCidr('10.1.0.5/24')`, `ip.contains(pool, addr)`, `ip.nthBlock(pool, 26, i)`.
 * Pure functions on strings in canonical form; no I/O.
 */
export { AddressFormatError, type Family, isValidCidr, isValidIp } from './parse';
export {
  type Cidr,
  bigIntToIp,
  blockCount,
  blockIndexOf,
  broadcast,
  canonicalCidr,
  canonicalIp,
  compareIps,
  contains,
  familyOf,
  firstHost,
  hasHostBits,
  indexOf,
  ipToBigInt,
  lastHost,
  networkOf,
  nextIp,
  nthAddress,
  nthBlock,
  offsetIp,
  overlaps,
  parseCidr,
  parseIp,
  prefixToMask,
  prevIp,
  size,
  splitCidr,
} from './cidr';
export { ipToMacV4, linkLocalFromMac } from './mac';
