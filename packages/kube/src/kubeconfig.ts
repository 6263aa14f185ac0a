/**
 * Loading credentials: a kubeconfig file (path, or $KUBECONFIG / ~/.kube/config), or the in-cluster
 * service-account configuration, all through @kubernetes/client-node's KubeConfig.
 */
import { KubeConfig } from '@kubernetes/client-node';
import { KubeTransport, type TransportOptions } from './transport';

export interface ConnectOptions extends TransportOptions {
  /** Path of a kubeconfig file. Default: client-node's loadFromDefault (KUBECONFIG, ~/.kube/config, in-cluster). */
  kubeconfig?: string;
  /** Context to use instead of the file's current-context. */
  context?: string;
}

export function loadKubeConfig(opts: Pick<ConnectOptions, 'kubeconfig' | 'context'> = {}): KubeConfig {
  const kc = new KubeConfig();
  if (opts.kubeconfig) kc.loadFromFile(opts.kubeconfig);
  else kc.loadFromDefault();
  if (opts.context) kc.setCurrentContext(opts.context);
  return kc;
}

/** A transport for the configured cluster. */
export function connect(opts: ConnectOptions = {}): KubeTransport {
  return new KubeTransport(loadKubeConfig(opts), opts);
}

/** The namespace of the kubeconfig's current context ("default" when it names none). */
export function currentNamespace(kc: KubeConfig): string {
  const ctx = kc.getContextObject(kc.getCurrentContext());
  return ctx?.namespace || 'default';
}
