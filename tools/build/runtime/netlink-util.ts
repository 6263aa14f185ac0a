/**
 * Stands in for `require("util")` inside the `netlink` package's bundled code
 * (tools/build/lib/bundle.mjs maps it here). The package's compiled TypeScript does
 * `__importStar(require("util"))`, which copies every export of node:util and so runs
 * all of its lazy getters: that loads util's diff and colour modules, and the colour
 * module creates process.stderr, which loads node:net and node:stream. Measured on an
 * executable's ADD: ~3 ms of a 27 ms budget for one function the package actually uses.
 * `__esModule` makes __importStar hand this object back as it is.
 */
import { getSystemErrorName } from 'node:util';

export = { __esModule: true, getSystemErrorName };
