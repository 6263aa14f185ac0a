/**
 * prevResult: the result of the previous plugin in a chain (ADD, CHECK) or
 * the final cached result (DEL, from 0.4.0). It is read as the config's
 * cniVersion, like libcni does, because the runtime converts it to that
 * version before handing it on.
 */
import { CniCode, CniError } from '../errors';
import type { NetConf } from './conf';
import { type Result, parseResult } from './result';

/** For plugins that need a previous result (chained plugins, CHECK): code 7 when absent or malformed. */
export function prevResultOf(conf: NetConf): Result {
  if (conf.prevResult === undefined || conf.prevResult === null) {
    throw new CniError(
      CniCode.InvalidNetworkConfig,
      'required prevResult missing',
      `plugin type ${JSON.stringify(conf.type)} must run after a plugin that produces a result (it cannot be first in a chain)`,
    );
  }
  const raw = conf.prevResult;
  // parseResult would decode a string as JSON text; inside a config the prevResult must already be an object.
  if (typeof raw !== 'object' || Array.isArray(raw)) {
    throw new CniError(
      CniCode.InvalidNetworkConfig,
      'invalid prevResult',
      `expected a JSON object, got ${JSON.stringify(raw).slice(0, 80)}`,
    );
  }
  return parseResult(raw, { version: conf.cniVersion, field: 'prevResult', code: CniCode.InvalidNetworkConfig });
}

/** For DEL, where prevResult may be absent: undefined then; code 7 when present but malformed. */
export function optionalPrevResultOf(conf: NetConf): Result | undefined {
  if (conf.prevResult === undefined || conf.prevResult === null) return undefined;
  return prevResultOf(conf);
}
