// ESLint (flat config) with typescript-eslint's recommended rules, for every TypeScript file of the
// workspace: shipped packages, test support, tests and e2e. Not type-aware: the type checker runs on its
// own (`npm run typecheck`), and type-aware linting tripled the time on the 2-core CI machine.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/node_modules/**', 'dist/**', '.nx/**', '**/native/build/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node, ...globals.jest } },
    rules: {
      // Unused names are type errors already (noUnusedLocals/Parameters); `_x` marks a deliberate one.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      // Native addons and lazily loaded modules are loaded with require() on purpose (start-up cost).
      '@typescript-eslint/no-require-imports': 'off',
      'no-console': 'off',
      // A `let` assigned once after a closure that reads it was created (set once its source exists).
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
    },
  },
  {
    // Shipped code never imports test support: test doubles live in the testing/ workspace packages.
    files: ['packages/*/src/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['@cnikit/*-testing', '**/testing/**', '**/fake-*'],
              message: 'test support (testing/*) must not reach a shipped bundle',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['**/*.mjs', '**/*.js', '**/*.cjs'],
    languageOptions: { globals: { ...globals.node } },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
);
