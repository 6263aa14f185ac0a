/** cilium-eni-agent: the node side (CiliumNode, pool, socket for the IPAM plugin). See docs/cilium-eni-ipam.md. */
import { agentMain } from '../cli';

agentMain(process.argv.slice(2)).catch((e) => {
  process.stderr.write(`cilium-eni-agent: ${e instanceof Error ? e.stack : String(e)}\n`);
  process.exit(1);
});
