// Writes config/crds.yaml from src/crd.ts:
//   npx esbuild --bundle --platform=node --log-level=warning packages/cilium-eni-ipam/config/generate.ts | node - packages/cilium-eni-ipam/config/crds.yaml
import * as fs from 'node:fs';
import { toYaml } from '@cnikit/kube';
import { ciliumNodeCrd } from '../src/crd';

fs.writeFileSync(process.argv[2] ?? 'crds.yaml', toYaml([ciliumNodeCrd()]));
