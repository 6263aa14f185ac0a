/** cilium-eni-operator: fills CiliumNode pools from EC2. See docs/cilium-eni-ipam.md. */
import { operatorMain } from '../cli';

operatorMain(process.argv.slice(2)).catch((e) => {
  process.stderr.write(`cilium-eni-operator: ${e instanceof Error ? e.stack : String(e)}\n`);
  process.exit(1);
});
