import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { WORKFLOWS, type WorkflowSchema } from '../contract/schema';
import { DEFAULT_TASK_QUEUE } from '../contract/messages';

/**
 * Writes the contract's zod schemas (contract/schema.ts) as JSON Schema into docs/schema/: one JSON Schema document
 * per workflow kind (`session.json`, …) whose `$defs` hold every shape by its contract name, and `messages.json`, the
 * catalogue of workflows and handlers pointing into them. `npx tsx scripts/schema.ts` regenerates them;
 * test/unit/contract-schema.test.ts fails while they are stale.
 */
export const SCHEMA_DIR = path.join('docs', 'schema');
export const REGENERATE = 'npx tsx scripts/schema.ts';

const idOf = (schema: z.ZodType): string => {
  const id = schema.meta()?.id;
  if (typeof id !== 'string') throw new Error('every workflow input, result and message schema needs an id (named() in contract/schema.ts)');
  return id;
};

/** One kind's JSON Schema document: every shape it uses under `$defs`, in name order. */
function kindDocument(kind: WorkflowSchema): Record<string, unknown> {
  const defs = new Map<string, string>();
  const add = (schema: z.ZodType) => {
    // Input mode: an object that is not declared strict stays open to fields a later version adds.
    const json = z.toJSONSchema(schema, { target: 'draft-2020-12', io: 'input', unrepresentable: 'throw', cycles: 'throw' }) as {
      $defs?: Record<string, unknown>;
    };
    for (const [id, def] of Object.entries(json.$defs ?? {})) {
      const text = JSON.stringify(def);
      const seen = defs.get(id);
      if (seen !== undefined && seen !== text) throw new Error(`two different shapes are both named ${id}`);
      defs.set(id, text);
    }
    idOf(schema);
  };
  add(kind.input);
  add(kind.result);
  for (const message of kind.messages) {
    if (message.input) add(message.input);
    if (message.result) add(message.result);
  }
  const sorted = [...defs.keys()].sort();
  return {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    $id: `${kind.kind}.json`,
    title: `Orchard ${kind.kind}: workflow type ${kind.workflowType}, workflow id ${kind.workflowId}`,
    description: `${kind.description} Generated from contract/schema.ts by ${REGENERATE}; messages.json lists its handlers.`,
    $defs: Object.fromEntries(sorted.map((id) => [id, JSON.parse(defs.get(id)!)])),
  };
}

/** The catalogue: each workflow's type, id, start input and result, and each handler's name, input and result. */
function catalogue(): Record<string, unknown> {
  const ref = (kind: WorkflowSchema, schema: z.ZodType | undefined) => (schema ? `${kind.kind}.json#/$defs/${idOf(schema)}` : undefined);
  return {
    description: `Orchard's workflows and their signals, updates and queries. Generated from contract/schema.ts by ${REGENERATE}.`,
    taskQueue: `${DEFAULT_TASK_QUEUE} (unless the workers' ORCHARD_TASK_QUEUE names another)`,
    workflows: WORKFLOWS.map((kind) => ({
      kind: kind.kind,
      workflowType: kind.workflowType,
      workflowId: kind.workflowId,
      description: kind.description,
      schema: `${kind.kind}.json`,
      input: ref(kind, kind.input),
      result: ref(kind, kind.result),
      messages: kind.messages.map((m) => ({ kind: m.kind, name: m.name, description: m.description, input: ref(kind, m.input), result: ref(kind, m.result) })),
    })),
  };
}

/** Every file docs/schema/ should hold, by name, with its exact content. */
export function renderSchemaFiles(): Map<string, string> {
  const files = new Map<string, string>();
  const text = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;
  for (const kind of WORKFLOWS) files.set(`${kind.kind}.json`, text(kindDocument(kind)));
  files.set('messages.json', text(catalogue()));
  return files;
}

if (require.main === module) {
  const dir = path.resolve(__dirname, '..', SCHEMA_DIR);
  fs.mkdirSync(dir, { recursive: true });
  const files = renderSchemaFiles();
  for (const name of fs.readdirSync(dir)) if (name.endsWith('.json') && !files.has(name)) fs.rmSync(path.join(dir, name));
  for (const [name, content] of files) fs.writeFileSync(path.join(dir, name), content);
  console.log(`wrote ${files.size} files into ${SCHEMA_DIR}/`);
}
