/**
 * vSwitch selection for a new ENI. Policies (eni_conf.vswitch_selection_policy):
 * "ordered" takes the first vSwitch, in the configured order, with enough free
 * IPs; "random" picks uniformly among those with enough; "most" takes the one
 * with the most free IPs. When none has `need` free IPs, the one with the most
 * (at least one) is taken; undefined when every vSwitch is full.
 */
import type { VSwitchInfo } from './types';
import type { VSwitchPolicy } from './config';

export function pickVSwitch(
  list: VSwitchInfo[],
  policy: VSwitchPolicy,
  need: number,
  random: () => number = Math.random,
): VSwitchInfo | undefined {
  const enough = list.filter((v) => v.available >= need);
  const most = (vs: VSwitchInfo[]): VSwitchInfo | undefined =>
    vs.reduce<VSwitchInfo | undefined>((b, v) => (!b || v.available > b.available ? v : b), undefined);
  if (enough.length === 0) {
    const m = most(list);
    return m && m.available > 0 ? m : undefined;
  }
  switch (policy) {
    case 'ordered':
      return enough[0];
    case 'random':
      return enough[Math.min(enough.length - 1, Math.floor(random() * enough.length))];
    case 'most':
      return most(enough);
  }
}
