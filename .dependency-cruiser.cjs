/**
 * The direction of dependency (issue 20, docs/architecture.md): workflows are deterministic and import nothing that
 * does I/O; activities do the I/O and never reach for the human-facing client; the client is the library a service
 * imports; `worker/`, the command line (`cli/`) and the demos compose everything. `npm run depcheck` fails on any
 * violation: there is no list of known exceptions.
 */
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'An import circle: the modules in it can only be understood, tested and moved together.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'contract-pure',
      severity: 'error',
      comment: "The contract (message names and shapes, ids, error codes) is what every side shares: it imports nothing but itself and Temporal's definitions.",
      from: { path: '^contract/', pathNot: '^contract/schema\\.ts$' },
      to: { pathNot: ['^contract/', '^node_modules/@temporalio/(workflow|common)/'] },
    },
    {
      name: 'contract-schema-pure',
      severity: 'error',
      comment: "The contract's zod schemas (contract/schema.ts): the contract, Temporal's definitions and zod, nothing else.",
      from: { path: '^contract/schema\\.ts$' },
      to: { pathNot: ['^contract/', '^node_modules/@temporalio/(workflow|common)/', '^node_modules/zod/'] },
    },
    {
      name: 'contract-schema-is-a-leaf',
      severity: 'error',
      comment: 'No other contract module imports the schemas: workflows import the contract, and zod must stay out of the workflow bundle.',
      from: { path: '^contract/', pathNot: '^contract/schema\\.ts$' },
      to: { path: '^contract/schema\\.ts$' },
    },
    {
      name: 'workflows-no-zod',
      severity: 'error',
      comment: 'The workflow bundle carries no zod: workflow validators are the xxxProblem functions of contract/messages.ts.',
      from: { path: '^workflows/' },
      to: { path: ['^contract/schema\\.ts$', '^node_modules/zod/'] },
    },
    {
      name: 'workflows-deterministic',
      severity: 'error',
      comment: 'Workflow code runs in the sandboxed, replayed V8 isolate: only its own modules, the contract and @temporalio/workflow.',
      from: { path: '^workflows/' },
      to: { pathNot: ['^workflows/', '^contract/', '^node_modules/@temporalio/(workflow|common)/'] },
    },
    {
      name: 'workflows-no-node',
      severity: 'error',
      comment: 'Node APIs in workflow code break determinism (and the workflow bundle).',
      from: { path: '^workflows/' },
      to: { dependencyTypes: ['core'] },
    },
    {
      name: 'activities-not-client',
      severity: 'error',
      comment: 'Activities receive a port for what they need from Temporal; they never import the human-facing client or the worker.',
      from: { path: '^activities/' },
      to: { path: '^(client|worker|cli|demos)/' },
    },
    {
      name: 'client-is-a-library',
      severity: 'error',
      comment:
        "The client a service imports depends on the contract and Temporal's client packages only (and Node itself): never on activities, workflows or the worker.",
      from: { path: '^client/' },
      to: {
        dependencyTypes: ['local', 'npm', 'npm-dev', 'npm-optional', 'npm-peer', 'npm-no-pkg', 'npm-unknown', 'aliased', 'unknown', 'undetermined'],
        pathNot: ['^client/', '^contract/', '^node_modules/@temporalio/(client|common|envconfig|proto)/'],
      },
    },
    {
      name: 'entry-points-on-top',
      severity: 'error',
      comment: 'The command line and the demos compose everything; nothing below them imports them.',
      from: { path: '^(contract|workflows|activities|client|worker)/' },
      to: { path: '^(cli|demos)/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(dist|\\.orchard)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { exportsFields: ['exports'], conditionNames: ['import', 'require', 'node', 'default'] },
  },
};
