// Unit tests, no root: the client against a real @grpc/grpc-js server on a UNIX socket.
module.exports = { ...require('../../jest.preset.js'), rootDir: __dirname, testMatch: ['<rootDir>/test/**/*.test.ts'] };
