/**
 * Topic keys (invariant 4): `create` with a topic is find-or-reuse on this key, so `PR 1741`, `pr-1741` and
 * `pr_1741` name one topic while different topics stay different. Pure: the workflow and its tests call it alike.
 */

/** Longest key kept; a topic is a short handle, not a description. */
const TOPIC_KEY_MAX = 80;

/**
 * Case-folded (Unicode NFKC, then lower case), every run of characters that are not letters or digits collapsed
 * to one `-`, trimmed of `-` at both ends. Undefined when nothing of a topic remains (blank, only punctuation).
 */
export function topicKey(raw: string): string | undefined {
  const key = raw
    .normalize('NFKC')
    .toLowerCase()
    .replace(/[^\p{L}\p{N}]+/gu, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, TOPIC_KEY_MAX)
    .replace(/-+$/, '');
  return key === '' ? undefined : key;
}
