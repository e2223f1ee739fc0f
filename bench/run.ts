import { benchCliStart } from './cli-start';
import { benchCommands } from './commands';
import { benchHandoff } from './handoff';
import { Report } from './report';
import { benchRoute } from './route';
import { benchScale } from './scale';
import { benchThroughput } from './throughput';
import { benchWaiting } from './waiting';

/**
 * `npm run bench`: what Orchard adds to an agent's work, each figure beside its baseline measured in the same run,
 * printed as a table and written to bench/results.json with the environment (docs/performance.md). Figures are
 * recorded, never asserted: a regression shows as a ratio in the next run.
 *
 * The sections run in this order. `BENCH_ONLY=route,scale` runs those alone; `BENCH_SKIP=handoff` leaves some out.
 */
const SECTIONS: Record<string, (report: Report) => Promise<void>> = {
  commands: benchCommands,
  cli: benchCliStart,
  handoff: (report) => benchHandoff(report),
  route: benchRoute,
  scale: benchScale,
  throughput: benchThroughput,
  waiting: benchWaiting,
};

async function main(): Promise<void> {
  const only = (process.env.BENCH_ONLY ?? '').split(',').filter(Boolean);
  const skip = (process.env.BENCH_SKIP ?? '').split(',').filter(Boolean);
  for (const name of [...only, ...skip]) if (!(name in SECTIONS)) throw new Error(`bench: no section ${name} (${Object.keys(SECTIONS).join(', ')})`);
  const report = await Report.open();
  for (const [name, section] of Object.entries(SECTIONS)) {
    if ((only.length > 0 && !only.includes(name)) || skip.includes(name)) continue;
    const started = performance.now();
    console.log(`\n== ${name}`);
    await section(report);
    console.log(`== ${name}: ${((performance.now() - started) / 1000).toFixed(1)} s`);
  }
  report.write();
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
