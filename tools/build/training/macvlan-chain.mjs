// The chain both meta-plugins train on (tools/build/lib/train.mjs), as `npm run bench` runs it: macvlan +
// host-local, then the meta-plugin, ADD, CHECK, STATUS then DEL, in throwaway network namespaces: a "host"
// (where the plugins run, with the macvlan parent mvmaster) and a pod. `setup(host, pod)` adds what the
// plugin's own case needs to both namespaces before the chain runs.
export function trainMacvlanChain(t, { meta, ifName, gateway, setup = () => {} }) {
  const host = `${t.id}-h`;
  const pod = `${t.id}-p`;
  const env = (command) => ({
    CNI_COMMAND: command,
    CNI_CONTAINERID: `${t.id}0123456789`,
    CNI_NETNS: `/var/run/netns/${pod}`,
    CNI_IFNAME: ifName,
    CNI_PATH: t.goPlugin(''),
    PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
  });
  const base = { cniVersion: '1.0.0', name: `train-${meta}` };
  const macvlan = {
    ...base,
    type: 'macvlan',
    master: 'mvmaster',
    mode: 'bridge',
    ipam: {
      type: 'host-local',
      dataDir: `${t.work}/ipam`,
      ranges: [[{ subnet: '172.30.0.0/24', gateway }]],
      routes: [{ dst: '0.0.0.0/0' }],
    },
  };
  const conf = {
    ...base,
    type: meta,
    overlay_hijack_subnet: ['10.244.0.0/16'],
    service_hijack_subnet: ['10.96.0.0/12'],
    log_options: { log_level: 'info', log_file: `${t.work}/${meta}.log` },
  };
  try {
    t.ip('netns', 'add', host);
    t.ip('-n', host, 'link', 'add', 'mvmaster', 'type', 'veth', 'peer', 'name', 'mvpeer');
    t.ip('-n', host, 'addr', 'add', '172.30.0.1/24', 'dev', 'mvmaster');
    for (const l of ['lo', 'mvmaster', 'mvpeer']) t.ip('-n', host, 'link', 'set', l, 'up');
    t.ip('netns', 'add', pod);
    setup(host, pod);
    const prev = JSON.parse(t.exec(t.goPlugin('macvlan'), env('ADD'), JSON.stringify(macvlan), host));
    const result = JSON.parse(t.call(env('ADD'), JSON.stringify({ ...conf, prevResult: prev }), host));
    t.call(env('CHECK'), JSON.stringify({ ...conf, prevResult: result }), host);
    // containerd 2.x asks every plugin of a 1.1.0 conflist for STATUS on each runtime status poll.
    t.call(env('STATUS'), JSON.stringify({ ...conf, cniVersion: '1.1.0' }), host);
    t.call(env('DEL'), JSON.stringify({ ...conf, prevResult: result }), host);
    t.exec(t.goPlugin('macvlan'), env('DEL'), JSON.stringify({ ...macvlan, prevResult: result }), host);
  } finally {
    for (const n of [pod, host]) {
      try {
        t.ip('netns', 'del', n);
      } catch {
        /* not created */
      }
    }
  }
}
