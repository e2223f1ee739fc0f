import type { Connection } from '@temporalio/client';
import type { SearchAttributeType } from '@temporalio/common';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes';
import { ORCHARD_SEARCH_ATTRIBUTES } from '../contract/search-attributes';

/** The `--type` names of `temporal operator search-attribute create`, by SDK type. */
const CLI_TYPE: Record<SearchAttributeType, string> = {
  TEXT: 'Text',
  KEYWORD: 'Keyword',
  INT: 'Int',
  DOUBLE: 'Double',
  BOOL: 'Bool',
  DATETIME: 'Datetime',
  KEYWORD_LIST: 'KeywordList',
};

export interface SearchAttributeProblems {
  readonly missing: readonly { name: string; type: string }[];
  readonly wrongType: readonly { name: string; type: string }[];
}

/** Which of `wanted` (default: what Orchard's workflows write) the namespace lacks or has with another type. */
export async function searchAttributeProblems(
  connection: Pick<Connection, 'operatorService'>,
  namespace: string,
  wanted: readonly { name: string; type: SearchAttributeType }[] = ORCHARD_SEARCH_ATTRIBUTES,
): Promise<SearchAttributeProblems> {
  const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace });
  const missing: { name: string; type: string }[] = [];
  const wrongType: { name: string; type: string }[] = [];
  for (const { name, type: valueType } of wanted) {
    const existing = customAttributes?.[name];
    if (existing === undefined || existing === null) missing.push({ name, type: CLI_TYPE[valueType] });
    else if (existing !== encodeSearchAttributeIndexedValueType(valueType)) wrongType.push({ name, type: CLI_TYPE[valueType] });
  }
  return { missing, wrongType };
}

/** A namespace without the search attributes the workflows upsert: every session start would fail in it. */
export class SearchAttributesMissingError extends Error {
  readonly code = 'search_attributes_missing';
  constructor(
    readonly namespace: string,
    readonly problems: SearchAttributeProblems,
  ) {
    const lines: string[] = [];
    if (problems.missing.length > 0) {
      lines.push(
        `namespace ${namespace} lacks the search attributes Orchard writes (${problems.missing.map((a) => a.name).join(', ')}); ` +
          'register them once per namespace, then start again:',
        ...problems.missing.map((a) => `  temporal operator search-attribute create --namespace ${namespace} --name ${a.name} --type ${a.type}`),
      );
    }
    for (const a of problems.wrongType) {
      lines.push(`namespace ${namespace} has ${a.name} with another type than ${a.type}: Orchard needs it as ${a.type}`);
    }
    super(lines.join('\n'));
    this.name = 'SearchAttributesMissingError';
  }
}

/** Throws SearchAttributesMissingError, with the commands that fix it, unless the namespace has them all. */
export async function assertSearchAttributes(connection: Pick<Connection, 'operatorService'>, namespace: string): Promise<void> {
  const problems = await searchAttributeProblems(connection, namespace);
  if (problems.missing.length > 0 || problems.wrongType.length > 0) throw new SearchAttributesMissingError(namespace, problems);
}
