// The live suite (test/live): a real model, so never part of `npm test` or CI. See test/live/orchestrator.test.ts.
export default {
  extensions: { ts: 'commonjs' },
  nodeArguments: ['--import=tsx'],
  files: ['test/live/**/*.test.ts'],
  timeout: '240s',
  workerThreads: false,
};
