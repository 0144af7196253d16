"""Turns -> training Samples.

Turns are grouped by (session, thread, segment_index) and ordered by turn_index; failed turns are
dropped — engine failures, client disconnects, bad bodies and the calls the gateway refused because
the session's budget was spent (``finish_reason="refused"``, dropped even if not marked failed), so
nothing past the budget becomes a Sample. A segment's turns form one :class:`Sample`:
``token_ids`` = the last turn's prompt + output. Turn k's output tokens sit at ``[len(prompt_k), len(prompt_k) + len(output_k))`` and,
because every later turn of the segment *extends* (its prompt starts with the previous turn's
prompt + output, verbatim), they sit at the same positions in the final sequence. ``loss_mask``
is 1 exactly there and ``rollout_logprobs`` carries the sampled logprobs there (0 elsewhere).
``realign`` turns are checked like ``extend`` (the held tokens are reused verbatim for them too).
The Sample carries the segment's kind and its link (``parent_thread_id``, ``parent_segment_index``,
``forked_from_turn``) from the event of the turn that opened it. A ``start``/``fork`` turn opens a segment; an ``extend`` turn whose prompt does not start with
the previous turn's tokens raises :class:`AlignmentBuildError` (it would silently corrupt training
data).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from legorl.errors import AlignmentBuildError  # defined in the error tree, re-exported
from legorl.trajectory.records import Sample, Turn


def build_samples(turns: Iterable[Turn], rollout_id: str) -> list[Sample]:
    groups: dict[tuple[str, str, int], list[Turn]] = defaultdict(list)
    for t in turns:
        if t.failed or t.finish_reason == "refused":
            continue
        groups[(t.session_id, t.thread_id, t.alignment.segment_index)].append(t)

    samples: list[Sample] = []
    for (session_id, thread_id, seg), ts in groups.items():
        ts.sort(key=lambda t: t.turn_index)
        prev: list[int] | None = None
        spans: list[tuple[int, Turn]] = []
        for t in ts:
            kind = t.alignment.kind
            if kind in ("extend", "realign"):
                if prev is None:
                    raise AlignmentBuildError(
                        f"session {session_id} thread {thread_id} segment {seg}: turn {t.turn_index} is "
                        f"{kind} but its segment has no earlier successful turn"
                    )
                if t.prompt_token_ids[: len(prev)] != prev:
                    raise AlignmentBuildError(
                        f"session {session_id} thread {thread_id} segment {seg}: turn {t.turn_index} says "
                        f"{kind} but its prompt does not start with the previous turn's {len(prev)} tokens"
                    )
            elif prev is not None:
                raise AlignmentBuildError(
                    f"session {session_id} thread {thread_id} segment {seg}: turn {t.turn_index} is {kind} "
                    "inside an existing segment"
                )
            spans.append((len(t.prompt_token_ids), t))
            prev = list(t.prompt_token_ids) + list(t.output_token_ids)

        assert prev is not None
        first = spans[0][1].alignment
        token_ids = prev
        n = len(token_ids)
        mask = [0] * n
        logprobs = [0.0] * n
        for start, t in spans:
            for j, (tok, lp) in enumerate(zip(t.output_token_ids, t.output_logprobs)):
                pos = start + j
                if token_ids[pos] != tok:  # cannot happen when the prefix checks above passed
                    raise AlignmentBuildError(f"turn {t.turn_index}: sampled token moved at position {pos}")
                mask[pos] = 1
                logprobs[pos] = float(lp)
        samples.append(
            Sample(
                rollout_id=rollout_id,
                thread_id=thread_id,
                segment_index=seg,
                token_ids=token_ids,
                loss_mask=mask,
                rollout_logprobs=logprobs,
                turn_indices=[t.turn_index for _, t in spans],
                alignment_events=[t.alignment for _, t in spans],
                session_id=session_id,
                segment_kind=first.segment_kind,
                parent_thread_id=first.parent_thread_id,
                parent_segment_index=first.parent_segment_index,
                forked_from_turn=first.forked_from_turn,
                weight_version=min(t.weight_version for _, t in spans),
            )
        )
    samples.sort(key=lambda s: s.turn_indices[0] if s.turn_indices else 0)
    return samples
