"""aider (PyPI, pinned, from a cached Python 3.12 venv layer) end to end: the real ``aider`` program in
a bubblewrap sandbox without network, through ``legorl rollout``'s path: the scripted gold fix in
the ``whole`` edit format resolves the trivial task, a wrong fix in the ``diff`` (SEARCH/REPLACE)
format scores 0, it connects to nothing but the gateway, and one SmolLM2 rollout exports with every
sampled token equal to the recorded turn outputs. The first run builds the venv layer (PyPI access
needed once, ~1.5 min); later runs reuse it."""

from __future__ import annotations

import pytest
from export_check import assert_export_matches_turns
from rollout_helpers import assert_gateway_only, rollout

from legorl.harnesses.aider import AiderHarness, search_replace_blocks
from legorl.harnesses.base import Budget, Harness
from legorl.harnesses.common import TRANSCRIPT_MARKER
from legorl.sandbox.base import ExecResult

SECRET = "s3cr3t-session-token"
BUDGET = Budget(max_turns=4, max_tokens_per_turn=700, temperature=1.0)

# ----------------------------------------------------------------------------- fast (no program)


def test_command_files_and_collect_classification():
    h = AiderHarness(edit_format="diff", model="m", context_window=9000)
    assert isinstance(h, Harness) and h.name == "aider" and h.dialect == "openai.chat"
    assert h.install.kind == "pip-venv" and h.install.packages == ("aider-chat==0.86.2",)
    assert h.install.python == "python3.12"
    with pytest.raises(ValueError, match="edit_format"):
        AiderHarness(edit_format="udiff")
    argv = h.argv()
    assert argv[:4] == ["/opt/legorl-harness/venv/bin/python", "-I", "-m", "aider"]
    assert {"--model=openai/m", "--edit-format=diff", "--map-tokens=0", "--message-file=/tmp/ISSUE.md"} <= set(argv)
    assert {"--yes-always", "--no-auto-commits", "--no-analytics", "--no-check-update", "--no-detect-urls"} <= set(argv)
    env = h.env("http://127.0.0.1:8000/v1", SECRET)
    assert env["OPENAI_API_BASE"] == "http://127.0.0.1:8000/v1" and env["OPENAI_API_KEY"] == SECRET
    assert not any(SECRET in a for a in argv) and SECRET not in h.prelude()  # the token only in the environment
    assert "OPENAI_API_KEY" in h.prelude() and ".git/info/exclude" not in h.prelude()
    assert ".git/info/exclude" in AiderHarness(map_tokens=1024).prelude()  # the map's cache stays out of the diff
    (settings,) = h.model_settings(BUDGET)
    assert settings["name"] == "openai/m" and settings["edit_format"] == "diff"
    assert settings["extra_params"] == {"max_tokens": 700} and settings["use_temperature"] == 1.0
    assert h.model_metadata(BUDGET)["openai/m"]["max_input_tokens"] == 9000
    assert set(h.home_files(BUDGET)) == {".aider.model.settings.yml", ".aider.model.metadata.json"}

    def res(out, code=0, timed_out=False):
        return ExecResult(code, f"{out}\n{TRANSCRIPT_MARKER}\n# aider chat started\n", "", 1.0, timed_out)

    r = h.collect(None, res("Applied edit to calc/arith.py"), BUDGET)  # type: ignore[arg-type]
    assert r.ending == "finished" and r.transcript.startswith("# aider chat started")
    gave_up = h.collect(None, res("Only 3 reflections allowed, stopping."), BUDGET)  # type: ignore[arg-type]
    assert gave_up.ending == "budget" and gave_up.summary["reflection_limit"]
    assert h.collect(None, res("Traceback", 1), BUDGET).ending == "crashed"  # type: ignore[arg-type]
    assert h.collect(None, res("", 137, True), BUDGET).ending == "timeout"  # type: ignore[arg-type]


def test_search_replace_blocks_rewrite_each_changed_region():
    before = "".join(f"line {i}\n" for i in range(20))
    after = before.replace("line 3\n", "line three\n").replace("line 15\n", "line 15\nline 15b\n")
    text = search_replace_blocks("a.py", before, after)
    assert text.count("<<<<<<< SEARCH") == 2 and text.count(">>>>>>> REPLACE") == 2
    out = before
    for block in text.split("<<<<<<< SEARCH\n")[1:]:
        search, _, rest = block.partition("=======\n")
        replace = rest.partition(">>>>>>> REPLACE")[0]
        assert out.count(search) == 1  # each SEARCH text is found, once
        out = out.replace(search, replace)
    assert out == after


# ----------------------------------------------------------------------------- the real program


@pytest.mark.slow
@pytest.mark.sandbox
def test_aider_gold_fix_resolves_only_talking_to_gateway(tmp_path, dash_tokens):
    # legorl rollout --harness aider --engine scripted-gold; the session token starts with -
    run = rollout("aider", "scripted-gold", tmp_path)
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 1.0), (r.status, r.cause, r.harness_log_tail)
    # the answer names calc/arith.py: aider adds it to the chat and asks again, then applies the edit;
    # the second prompt puts the file before the history (rebuilt), so it forks a linked segment
    first, second = r.samples
    assert [e.kind for e in first.alignment_events] == ["start"] and first.num_sampled > 0
    assert [e.kind for e in second.alignment_events] == ["fork"] and second.num_sampled > 0
    assert second.parent_segment_index == 0 and second.forked_from_turn == 0
    assert "calc/arith.py" in run.prompts[1] and "+    return a + b" in r.diff
    assert_gateway_only(run)


@pytest.mark.slow
@pytest.mark.sandbox
def test_aider_wrong_fix_in_search_replace_blocks_scores_zero(tmp_path, underscore_tokens):
    # the session token starts with _; the edit format is aider's SEARCH/REPLACE ("diff")
    run = rollout("aider", "scripted-wrong", tmp_path, edit_format="diff")
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 0.0), (r.status, r.cause, r.harness_log_tail)
    assert "+# attempted fix" in r.diff and "SEARCH/REPLACE" in run.prompts[0]
    assert ".aider" not in r.diff  # history files live in /tmp, no .gitignore edit
    assert_gateway_only(run)


@pytest.mark.slow
@pytest.mark.sandbox
def test_aider_smollm2_rollout_exports_the_sampled_tokens(tmp_path):
    """One rollout of the embedded SmolLM2 through aider: `legorl export` gives samples whose
    loss-masked tokens are exactly the recorded turns' output tokens."""
    run = rollout(
        "aider",
        "embedded",
        tmp_path,
        budget=Budget(max_turns=1, max_tokens_per_turn=64, wall_clock_s=300, turn_slack=0),
    )
    assert run.rollout.status == "ok", (run.rollout.cause, run.rollout.harness_log_tail)
    assert_export_matches_turns(run.run_dir, tmp_path / "export")
    assert_gateway_only(run)
