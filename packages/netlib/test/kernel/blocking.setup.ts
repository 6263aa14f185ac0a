// The second run of the kernel suites (jest.config.js): every channel is the blocking one, as in a plugin binary.
import { allowBlockingSockets } from '../../src/unix/mode';

allowBlockingSockets();
