// The extension's lint rules (run by tests/test_style.py beside prettier, which owns the layout).
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';

export default defineConfig(
  { ignores: ['lib/', 'test-lib/', 'node_modules/'] },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    files: ['src/**/*.ts'],
    rules: {
      curly: 'error',
      eqeqeq: 'error',
      'prefer-arrow-callback': 'error',
      '@typescript-eslint/naming-convention': [
        'error',
        { selector: 'interface', format: ['PascalCase'], prefix: ['I'] }
      ]
    }
  },
  {
    // The unit tests: plain CommonJS run by `node --test` on the compiled modules.
    files: ['test/**/*.js'],
    languageOptions: {
      sourceType: 'commonjs',
      globals: { require: 'readonly', module: 'readonly', console: 'readonly' }
    },
    rules: { '@typescript-eslint/no-require-imports': 'off' }
  }
);
