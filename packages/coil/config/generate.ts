// Writes config/crds.yaml from src/api/crds.ts:
//   npx esbuild --bundle --platform=node --log-level=warning packages/coil/config/generate.ts | node - packages/coil/config/crds.yaml
import * as fs from 'node:fs';
import { toYaml } from '@cnikit/kube';
import { coilCrds } from '../src/api/crds';

fs.writeFileSync(process.argv[2] ?? 'crds.yaml', toYaml(coilCrds()));
