/**
 * Numbers and names of Coil's egress NAT that both ends and the kernel state share. They are
 * today's Coil v2 values: a pod restarted under another implementation finds the same rules,
 * tables and devices, and state is read back from the kernel by them (no side files).
 */

/** Client pod: rule priorities (see clientRules in client-plan.ts for what each one does). */
export const PREF_LINK_LOCAL = 1800;
export const PREF_NAT_PRIVATE = 1900;
export const PREF_PRIVATE_BASE = 2000;
export const PREF_NAT_PUBLIC = 2100;
/** Client pod: private egress destinations (looked up before the pod's own private routes). */
export const TABLE_NAT_PRIVATE = 117;
/** Client pod: every other egress destination (looked up after them). */
export const TABLE_NAT_PUBLIC = 118;
/** Router pod: host routes back to the clients, looked up for packets coming in on the uplink. */
export const TABLE_ROUTER = 118;
export const PREF_ROUTER = 2000;
/** Route protocol of every route Coil installs (also tells Coil's routes from others). */
export const PROTOCOL_COIL = 30;

export const DEFAULT_FOU_PORT = 5555;
/** IP protocol numbers a FoU port hands its payload to. */
export const IPPROTO_IPIP = 4;
export const IPPROTO_IPV6 = 41;

/** Flow-based (collect_md) receivers: decapsulate FoU packets no fou4_/fou6_ device matches. */
export const CATCH_ALL_V4 = 'coil_ipip4';
export const CATCH_ALL_V6 = 'coil_ipip6';

/** Outer TTL of the tunnels, as Coil's own devices. */
export const TUNNEL_TTL = 225;

/** Private address space: reached through the pod network, unless an Egress names a part of it. */
export const PRIVATE_V4 = ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16'] as const;
export const PRIVATE_V6 = ['fc00::/7'] as const;
export const LINK_LOCAL_V4 = '169.254.0.0/16';
export const LINK_LOCAL_V6 = 'fe80::/10';

/** Pod annotation asking for NAT: `egress.coil.cybozu.com/<egress namespace>: name1,name2`. */
export const ANNOTATION_EGRESS_PREFIX = 'egress.coil.cybozu.com/';
