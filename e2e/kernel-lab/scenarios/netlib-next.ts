/** netlib's tunnel/ and fou/ modules, as the scenarios import them. */
export { tunnel, fou } from '@cnikit/netlib';
