module.exports = { ...require('../../jest.preset.js'), rootDir: __dirname, testMatch: ['<rootDir>/test/**/*.test.ts'] };
