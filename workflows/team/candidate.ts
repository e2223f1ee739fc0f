/**
 * The TeamRun's `completion_candidate`, as committed facts' activities answer it. Pure (it runs in the workflow).
 *
 * Facts commit concurrently — two Members settle at once — and their answers reach the workflow in either order: an
 * assessment read at an older work revision than one already applied is stale and is dropped. "Ready" is announced
 * to the Coordinator once per assessed revision, and only when no execution is still running in the workflow's view
 * (the run could not be certified while one is: `org_run_complete` would be refused `turn_running`); a ready board
 * heard while another execution's end is on its way is announced when that end is applied.
 */

/** An activity's answer: the candidate, the work revision it was read at, and the revision of the fact committed. */
export interface Assessment {
  readonly candidate?: string;
  /** Absent in histories from before it was sent: the fact's own revision stands in. */
  readonly candidateRevision?: number;
  readonly revision: number;
}

export interface CandidateState {
  readonly state?: string;
  readonly revision: number;
  /** The assessed revision whose readiness was announced last (-1: none). */
  readonly announced: number;
}

export const NO_CANDIDATE: CandidateState = { revision: 0, announced: -1 };

/** The candidate after an assessment: unchanged when the assessment is stale or carries none. */
export function takeAssessment(current: CandidateState, assessment: Assessment): CandidateState {
  if (assessment.candidate === undefined) return current;
  const at = assessment.candidateRevision ?? assessment.revision;
  if (at < current.revision) return current;
  return { ...current, state: assessment.candidate, revision: at };
}

/** Whether "ready" is to be announced now; the returned state records it, so each revision is announced once. */
export function announceReady(current: CandidateState, running: number): { readonly announce: boolean; readonly next: CandidateState } {
  if (current.state !== 'ready' || running > 0 || current.announced === current.revision) return { announce: false, next: current };
  return { announce: true, next: { ...current, announced: current.revision } };
}
