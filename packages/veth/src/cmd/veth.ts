/**
 * veth: a chained meta-plugin that gives macvlan/SR-IOV pods a veth path to
 * their host and to Services. See docs/veth.md.
 */
import { pluginMain } from '@cnikit/netlib';
import { add, check, del, gc, status } from '../plugin';

pluginMain({ add, del, check, gc, status }, { about: 'cnikit veth meta-plugin: pod <-> host and Service traffic for macvlan/SR-IOV pods' });
