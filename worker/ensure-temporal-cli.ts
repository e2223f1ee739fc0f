import { progress } from './progress';
import { TemporalCliUnavailableError, resolveTemporalCli } from './temporal-cli';

/**
 * Makes sure a `temporal` binary exists (building it with Go if need be) and prints its path: CI runs this first, so
 * the several-minute first build shows as its own step instead of a test timeout.
 */
void (async () => {
  // A spinner beside the step on a terminal (the first build takes minutes); plain lines in CI.
  const show = await progress('[temporal-cli]');
  try {
    const cli = await resolveTemporalCli(show);
    show.end();
    console.log(cli);
  } catch (err) {
    show.end(false);
    // Without a binary the stack can still use the SDK's download where the network allows: warn, don't fail.
    if (err instanceof TemporalCliUnavailableError) {
      console.error(`[temporal-cli] ${err.message}`);
      process.exit(0);
    }
    console.error(err);
    process.exit(1);
  }
})();
