import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

/**
 * Custom search attributes registered by the dev stack (temporal-dev.yaml) and, on a real cluster, by
 * `temporal operator search-attribute create`. The dev server has 10 Keyword slots: spend them carefully.
 */
export const ORCHARD_KIND = defineSearchAttributeKey('OrchardKind', SearchAttributeType.KEYWORD);
export const ORCHARD_STATUS = defineSearchAttributeKey('OrchardStatus', SearchAttributeType.KEYWORD);
export const ORCHARD_PARENT = defineSearchAttributeKey('OrchardParent', SearchAttributeType.KEYWORD);
export const ORCHARD_HOST = defineSearchAttributeKey('OrchardHost', SearchAttributeType.KEYWORD);

/** Set on a team run once any of its handoffs missed the SLO (query `OrchardHandoffSloMissed = true`). */
export const ORCHARD_HANDOFF_SLO_MISSED = defineSearchAttributeKey('OrchardHandoffSloMissed', SearchAttributeType.BOOL);

/** Set on an isolated child whose host runs with ORCHARD_SANDBOX=off (query `OrchardUnconfined = true`). */
export const ORCHARD_UNCONFINED = defineSearchAttributeKey('OrchardUnconfined', SearchAttributeType.BOOL);

export const ORCHARD_SEARCH_ATTRIBUTES = [ORCHARD_KIND, ORCHARD_STATUS, ORCHARD_PARENT, ORCHARD_HOST, ORCHARD_HANDOFF_SLO_MISSED, ORCHARD_UNCONFINED] as const;
