"""Read API for LEGO-RL run directories (for this repo's trainer and for any other trainer).

A run directory holds ``run.sqlite`` (index + write-ahead token arrays) and ``tokens/*.parquet``
(compacted token arrays); see :mod:`legorl.trajectory.store` for the layout. Read it with::

    from legorl.store import open_run

    store = open_run("runs/demo")
    for rollout in store.iter_rollouts():                 # Rollout records (reward, status, grader...)
        for s in store.samples(rollout.rollout_id):       # training Samples of that rollout
            s.token_ids, s.loss_mask, s.rollout_logprobs  # loss_mask == 1 exactly on sampled tokens
            s.reward, s.thread_id, s.segment_index, s.segment_kind
    for turn in store.iter_turns(session_id=None):        # every recorded model call, token exact
        turn.prompt_token_ids, turn.output_token_ids, turn.output_logprobs, turn.alignment.kind
    store.get_turn(session_id, turn_index)
    store.turn_index()                                    # index columns only (no arrays), as dicts

Or export everything as Parquet/JSONL (``legorl export RUN_DIR --format parquet --out DIR``,
:func:`legorl.trajectory.export.export_run`) and read it with pyarrow/pandas/datasets::

    import pyarrow.parquet as pq
    samples = pq.read_table("DIR/samples.parquet")        # token_ids, loss_mask, rollout_logprobs, reward, ...
"""

from legorl.trajectory.export import export_run
from legorl.trajectory.records import AlignmentEvent, Rollout, Sample, Turn
from legorl.trajectory.store import RunStore, open_run

__all__ = ["RunStore", "open_run", "export_run", "Turn", "Sample", "Rollout", "AlignmentEvent"]
