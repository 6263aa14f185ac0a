// Training scenario of `router` (tools/build/lib/train.mjs): the chain `npm run bench` runs,
// macvlan + host-local then router on a secondary interface (net1) of a pod whose eth0 comes
// from an overlay (a bridge cni0 in the "host" namespace), ADD, CHECK, STATUS then DEL.
export function train(t) {
  const host = `${t.id}-h`;
  const pod = `${t.id}-p`;
  const podPath = `/var/run/netns/${pod}`;
  const env = (command) => ({
    CNI_COMMAND: command,
    CNI_CONTAINERID: `${t.id}0123456789`,
    CNI_NETNS: podPath,
    CNI_IFNAME: 'net1',
    CNI_PATH: t.goPlugin(''),
    PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
  });
  const base = { cniVersion: '1.0.0', name: 'train-router' };
  const macvlan = {
    ...base,
    type: 'macvlan',
    master: 'mvmaster',
    mode: 'bridge',
    ipam: {
      type: 'host-local',
      dataDir: `${t.work}/ipam`,
      ranges: [[{ subnet: '172.30.0.0/24', gateway: '172.30.0.254' }]],
      routes: [{ dst: '0.0.0.0/0' }],
    },
  };
  const router = {
    ...base,
    type: 'router',
    overlay_hijack_subnet: ['10.244.0.0/16'],
    service_hijack_subnet: ['10.96.0.0/12'],
    log_options: { log_level: 'info', log_file: `${t.work}/router.log` },
  };
  try {
    t.ip('netns', 'add', host);
    t.ip('-n', host, 'link', 'add', 'mvmaster', 'type', 'veth', 'peer', 'name', 'mvpeer');
    t.ip('-n', host, 'addr', 'add', '172.30.0.1/24', 'dev', 'mvmaster');
    t.ip('-n', host, 'link', 'add', 'cni0', 'type', 'bridge');
    t.ip('-n', host, 'addr', 'add', '10.244.0.1/16', 'dev', 'cni0');
    for (const l of ['lo', 'mvmaster', 'mvpeer', 'cni0']) t.ip('-n', host, 'link', 'set', l, 'up');
    t.ip('netns', 'add', pod);
    // The pod's eth0 from the overlay, as the cluster network leaves it before Multus' secondary one.
    t.ip('-n', host, 'link', 'add', 'ov0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod);
    t.ip('-n', host, 'link', 'set', 'ov0', 'master', 'cni0', 'up');
    t.ip('-n', pod, 'addr', 'add', '10.244.1.10/16', 'dev', 'eth0');
    t.ip('-n', pod, 'link', 'set', 'eth0', 'up');
    t.ip('-n', pod, 'route', 'add', 'default', 'via', '10.244.0.1', 'dev', 'eth0');
    const prev = JSON.parse(t.exec(t.goPlugin('macvlan'), env('ADD'), JSON.stringify(macvlan), host));
    const result = JSON.parse(t.call(env('ADD'), JSON.stringify({ ...router, prevResult: prev }), host));
    t.call(env('CHECK'), JSON.stringify({ ...router, prevResult: result }), host);
    // containerd 2.x asks every plugin of a 1.1.0 conflist for STATUS on each runtime status poll.
    t.call(env('STATUS'), JSON.stringify({ ...router, cniVersion: '1.1.0' }), host);
    t.call(env('DEL'), JSON.stringify({ ...router, prevResult: result }), host);
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
