import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';

/** A fixed identity and no system or global config: tests do not depend on the machine's git setup. */
export const GIT_TEST_ENV: NodeJS.ProcessEnv = {
  PATH: process.env.PATH,
  HOME: tmpdir(),
  LC_ALL: 'C',
  GIT_AUTHOR_NAME: 'Test',
  GIT_AUTHOR_EMAIL: 'test@example.invalid',
  GIT_COMMITTER_NAME: 'Test',
  GIT_COMMITTER_EMAIL: 'test@example.invalid',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_EDITOR: 'true',
  GIT_MERGE_AUTOEDIT: 'no',
};

export function gitIn(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, env: GIT_TEST_ENV, encoding: 'utf8', stdio: 'pipe' }).trim();
}
