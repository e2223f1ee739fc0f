import { GoToolBuildError, GoToolUnavailableError, orchardCacheDir, resolveGoTool, type GoTool } from './go-tool';

export { isChecksumDbUnreachable } from './go-tool';

/** The Temporal CLI Go module we build when no binary is installed; pinned so every machine runs the same server. */
export const TEMPORAL_CLI_MODULE = 'github.com/temporalio/cli/cmd/temporal@v1.5.1';

const TEMPORAL_CLI: GoTool = {
  module: TEMPORAL_CLI_MODULE,
  binary: 'temporal',
  label: 'the Temporal CLI',
  envVar: 'ORCHARD_TEMPORAL_CLI',
  unavailableHint: 'install the Temporal CLI, or let the SDK download its dev server (needs network)',
};

/** No `temporal` binary exists and none can be built here (no Go): the caller falls back to the SDK download. */
export class TemporalCliUnavailableError extends GoToolUnavailableError {
  override readonly code = 'temporal_cli_unavailable';
  constructor(message: string) {
    super(message);
    this.name = 'TemporalCliUnavailableError';
  }
}

/** Thrown when `go install` of the CLI fails; carries the tail of its output. */
class TemporalCliBuildError extends GoToolBuildError {
  override readonly code = 'temporal_cli_build_failed';
  constructor(message: string, outputTail: string) {
    super(message, outputTail);
    this.name = 'TemporalCliBuildError';
  }
}

/** Orchard's cache directory, `${XDG_CACHE_HOME:-~/.cache}/orchard`, shared by every checkout on the machine. */
export function temporalCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  return orchardCacheDir(env);
}

/**
 * A path to the `temporal` binary: PATH, then `ORCHARD_TEMPORAL_CLI`, then the cache; when none exists and Go is on
 * PATH, builds it into the cache (several minutes the first time). Throws `TemporalCliUnavailableError` when there is
 * no binary and no Go.
 */
export async function resolveTemporalCli(log: (line: string) => void, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  try {
    return await resolveGoTool(TEMPORAL_CLI, log, { env });
  } catch (err) {
    // Callers tell the Temporal CLI's failures apart by these classes (the stack falls back to the SDK's download).
    if (err instanceof GoToolUnavailableError) throw new TemporalCliUnavailableError(err.message);
    if (err instanceof GoToolBuildError) throw new TemporalCliBuildError(err.summary, err.outputTail);
    throw err;
  }
}
