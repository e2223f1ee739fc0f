import { resolveGoTool, type GoTool } from './go-tool';

/** Toxiproxy's server, pinned; the fault tests put it between the workers and PostgreSQL or Temporal. */
export const TOXIPROXY: GoTool = {
  module: 'github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0',
  binary: 'toxiproxy-server',
  // `go install …/cmd/server` names its binary after the directory.
  builtName: 'server',
  label: 'Toxiproxy',
  envVar: 'ORCHARD_TOXIPROXY_SERVER',
  unavailableHint: 'build it with `npx tsx scripts/ensure-toxiproxy.ts` (needs Go and the Go module proxy)',
};

/**
 * The `toxiproxy-server` binary: PATH, `ORCHARD_TOXIPROXY_SERVER`, then Orchard's cache (where the Temporal CLI is
 * built too). With `build: false` (the tests) a missing binary is an error naming the script that builds it.
 */
export function resolveToxiproxyServer(log: (line: string) => void, options: { build?: boolean; env?: NodeJS.ProcessEnv } = {}): Promise<string> {
  return resolveGoTool(TOXIPROXY, log, options);
}
