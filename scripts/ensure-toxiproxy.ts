import { resolveToxiproxyServer } from '../worker/toxiproxy';

/**
 * Builds `toxiproxy-server` into Orchard's cache if it is not there yet and prints its path. `.ci/run` runs it before
 * the tests; when it fails it prints why (on stdout too) and exits non-zero, and `.ci/run` hands that reason to the
 * fault tests (ORCHARD_TOXIPROXY_UNAVAILABLE), which then fail with it instead of trying again inside a test's timeout.
 */
resolveToxiproxyServer((line) => console.error(`[toxiproxy] ${line}`)).then(
  (server) => console.log(server),
  (err: unknown) => {
    // On stdout as well as in the log: `.ci/run` captures stdout as the reason it hands to the tests.
    const reason = err instanceof Error ? err.message : String(err);
    console.error(`[toxiproxy] ${reason}`);
    console.log(reason);
    process.exit(1);
  },
);
