"""Tasks of the generated ``oneline-train`` suite for runs that must train every step."""

from __future__ import annotations

# A step trains only on groups with reward variance. These are the oneline-train tasks the base model
# solved most often at temperature 1: 2-4 times in 12 each (the other 9 of the first 17 measured:
# 0-2), by `legorl tasks filter oneline-train --samples 12` with the demo's harness. 8 of them × 4
# rollouts leave a step without signal about once in 3,000 (estimated from those rates); 8 tasks drawn
# from the whole suite (about 1 rollout in 10 solved) failed a CI run that way. A run that starts with
# 2 of them and refills (dynamic_sampling_rounds 6) goes on until 2 groups have signal: a step goes
# untrained only when none of the 8 had any, as before, and most steps run 2-3 groups, not 8.
MIDRANGE_TASKS = [f"legorl__oneline-train-{n:03d}" for n in (16, 5, 13, 15, 1, 2, 6, 12)]
