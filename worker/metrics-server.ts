import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { metricsRegistry } from '../activities/metrics';

/**
 * The worker's metrics endpoint (ORCHARD_METRICS_PORT): `GET /metrics` is Orchard's own metrics (activities/metrics.ts,
 * labels from closed sets only); `GET /metrics/temporal` passes on the Temporal SDK's metrics, which the worker's
 * runtime exports on a loopback port of its own (`sdkMetricsUrl`), so one port serves both.
 */
export interface MetricsServer {
  /** The port it listens on (the one asked for, or the one the system chose for 0). */
  readonly port: number;
  close(): Promise<void>;
}

export async function startMetricsServer(options: { port: number; host?: string; sdkMetricsUrl?: string }): Promise<MetricsServer> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    const answer = async (): Promise<{ status: number; type: string; body: string }> => {
      if (path === '/metrics') return { status: 200, type: metricsRegistry.contentType, body: await metricsRegistry.metrics() };
      if (path === '/metrics/temporal') {
        if (!options.sdkMetricsUrl) return { status: 404, type: 'text/plain', body: "this worker's runtime exports no Temporal SDK metrics\n" };
        const sdk = await fetch(options.sdkMetricsUrl, { signal: AbortSignal.timeout(5000) });
        return { status: sdk.status, type: sdk.headers.get('content-type') ?? 'text/plain; version=0.0.4', body: await sdk.text() };
      }
      return { status: 404, type: 'text/plain', body: 'not found: GET /metrics (Orchard) or /metrics/temporal (the Temporal SDK)\n' };
    };
    answer().then(
      ({ status, type, body }) => res.writeHead(status, { 'content-type': type }).end(req.method === 'HEAD' ? undefined : body),
      (err: unknown) => res.writeHead(502, { 'content-type': 'text/plain' }).end(`metrics unavailable: ${err instanceof Error ? err.message : String(err)}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
