"""Grade SWE-bench-format predictions (``legorl grade``): JSONL records with ``instance_id``,
``model_patch`` and optionally ``model_name_or_path``, against a task suite.

Every prediction is graded and reported; none is dropped. A prediction is identified by
(``instance_id``, ``model_name_or_path``): a file may hold several models' predictions for the same
instance (each is graded), but the same (instance, model) twice is refused with a :class:`ConfigError`
naming the instance — which of the two should count is not ours to guess.

The report's ``instances`` maps a key to each prediction's result: the ``instance_id`` when every
instance is predicted once (the usual one-model file), else ``"<instance_id>@<model_name_or_path>"``
for every prediction (``keyed_by`` says which); each result also carries ``instance_id`` and
``model_name_or_path``, and ``summary.by_model`` summarises each model.

Each prediction is graded in isolation (:func:`legorl.grading.grader.grade_isolated`): a failure of our
own code on one is that one's ``status: "grader_error"`` with its ``cause``; every other result stands
and the report is written. ``resolved`` is false when a blocking flag zeroed the reward;
``tests_resolved`` is the raw test outcome (every expected test passed).
"""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from legorl.errors import ConfigError, TaskError
from legorl.trajectory.records import GraderReport


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"duplicate key {key!r}: one of the two values would be dropped silently")
        out[key] = value
    return out


def load_predictions(path: Path) -> list[dict]:
    """The prediction records of a ``.jsonl`` file (one object a line) or a ``.json`` file (a list of
    objects, or an object mapping any key to one). Each needs ``instance_id`` (a non-empty string) and
    ``model_patch`` (a string, or null: no patch); ``model_name_or_path`` is a string or null when present.
    Anything else raises :class:`ConfigError` naming the file, the line (or record) and the field."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"predictions file {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc})") from None
    located: list[tuple[str, object]] = []  # (where, record)
    if path.suffix == ".json":
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ConfigError(f"{path}: not valid JSON: {exc}") from None
        if isinstance(data, dict):
            located = [(f"{path}: record {k!r}", v) for k, v in data.items()]
        elif isinstance(data, list):
            located = [(f"{path}: record {i}", v) for i, v in enumerate(data)]
        else:
            raise ConfigError(f"{path}: expected a list or an object of prediction records, got {type(data).__name__}")
    else:
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    located.append((f"{path}:{n}", json.loads(line, object_pairs_hook=_no_duplicate_keys)))
                except ConfigError as exc:
                    raise ConfigError(f"{path}:{n}: {exc}") from None
                except (json.JSONDecodeError, RecursionError) as exc:
                    raise ConfigError(f"{path}:{n}: not valid JSON: {exc}") from None
    records = []
    for where, r in located:
        if not isinstance(r, dict):
            raise ConfigError(
                f"{where}: expected an object with 'instance_id' and 'model_patch', got {type(r).__name__}"
            )
        for key in ("instance_id", "model_patch"):
            if key not in r:
                raise ConfigError(f"{where}: field {key!r} is missing")
        if not isinstance(r["instance_id"], str) or not r["instance_id"]:
            raise ConfigError(f"{where}: field 'instance_id' must be a non-empty string, got {r['instance_id']!r:.60}")
        for key in ("model_patch", "model_name_or_path"):
            if r.get(key) is not None and not isinstance(r[key], str):
                raise ConfigError(f"{where}: field {key!r} must be a string or null, got {type(r[key]).__name__}")
        for key in ("instance_id", "model_name_or_path"):
            # a JSON escape can spell a lone surrogate: no text, and no terminal or file could show the key
            # (a model_patch with one is that prediction's refused diff, graded like any other)
            if isinstance(r.get(key), str) and not _is_text(r[key]):
                raise ConfigError(f"{where}: field {key!r} is not Unicode text (a lone surrogate): {r[key]!r:.80}")
        records.append(r)
    return records


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _model(p: dict) -> str:
    """The model a prediction came from ('' when the record does not say)."""
    return str(p.get("model_name_or_path") or "")


def prediction_keys(preds: list[dict]) -> list[str]:
    """The report key of each prediction, in order: its instance id when every instance is predicted once,
    else ``"<instance_id>@<model_name_or_path>"``. Raises :class:`ConfigError` naming the instance when the
    same (instance, model) appears twice."""
    ids = [(str(p["instance_id"]), _model(p)) for p in preds]
    dupes = sorted(k for k, n in Counter(ids).items() if n > 1)
    if dupes:
        what = "; ".join(
            f"instance {iid!r}" + (f" from model {m!r}" if m else " (no model_name_or_path)") for iid, m in dupes
        )
        raise ConfigError(
            f"{len(dupes)} prediction(s) appear more than once for the same (instance, model): {what}; "
            "keep one prediction per instance and model"
        )
    if len({iid for iid, _ in ids}) == len(ids):
        return [iid for iid, _ in ids]
    keys = [f"{iid}@{m}" for iid, m in ids]
    if len(set(keys)) != len(keys):  # an '@' in an instance id or model name made two keys alike
        clash = sorted(k for k, n in Counter(keys).items() if n > 1)
        raise ConfigError(
            f"predictions {', '.join(map(repr, clash))} cannot be told apart in the report "
            "(an '@' in an instance id or model name); rename the models"
        )
    return keys


def _summary(results: list[dict]) -> dict:
    total = len(results)
    return {
        "total": total,
        "resolved": sum(r["resolved"] for r in results),
        "reward_mean": sum(r["reward"] for r in results) / total if total else 0.0,
        "flagged": sum(bool(r["blocking_flags"]) for r in results),
        "env_failure": sum(r["status"] == "env_failure" for r in results),
        "grader_error": sum(r["status"] == "grader_error" for r in results),
    }


def grade_predictions(
    preds: list[dict],
    suite: str,
    workers: int = 2,
    timeout: float = 120,
    reward_mode: str = "binary",
    flagged_policy: str = "zero",
    backend=None,
) -> dict:
    from legorl.grading.grader import grade_isolated, grader_error_report
    from legorl.tasks.loader import load_suite

    keys = prediction_keys(preds)  # refuse duplicates before grading anything
    tasks = {t.instance_id: t for t in load_suite(suite)}
    unknown = sorted({p["instance_id"] for p in preds} - set(tasks))
    if unknown:
        raise TaskError(f"{len(unknown)} prediction instance id(s) not in suite {suite!r}: {', '.join(unknown)}")
    if backend is None:
        from legorl.sandbox.bwrap import BwrapBackend

        # predictions are untrusted by definition: their tests cannot fill the host's disk (4 GiB each)
        backend = BwrapBackend(disk_mb=4096)

    def one(p: dict) -> dict:
        # each prediction in isolation: a failure of our code on it is its grader_error, not the run's end
        r = grade_isolated(
            tasks[p["instance_id"]],
            p.get("model_patch") or "",
            backend,
            timeout=timeout,
            reward_mode=reward_mode,
            flagged_policy=flagged_policy,
        )
        try:
            return entry(p, r)
        except Exception as exc:  # a report this code cannot render is still this prediction's
            return entry(p, grader_error_report(exc))

    def entry(p: dict, r: GraderReport) -> dict:
        return {
            "instance_id": p["instance_id"],
            "model_name_or_path": p.get("model_name_or_path"),
            "resolved": r.resolved,
            "tests_resolved": r.tests_resolved,
            "reward": r.reward,
            "status": r.status,
            "cause": r.cause,
            "flags": r.flags,
            "blocking_flags": [f.label for f in r.blocking_flags()],
            "flag_details": [f.model_dump() for f in r.flag_details],
            "tests": r.tests,
            "fail_to_pass_fraction": r.fail_to_pass_fraction,
            "attempts": r.attempts,
            "duration_s": round(r.duration_s, 3),
        }

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        graded = list(pool.map(one, preds))
    results = dict(zip(keys, graded, strict=True))  # keys are unique: nothing is overwritten
    by_model: dict[str, list[dict]] = {}
    for r in graded:
        by_model.setdefault(str(r["model_name_or_path"] or ""), []).append(r)
    return {
        "suite": suite,
        "keyed_by": ["instance_id"]
        if keys == [str(p["instance_id"]) for p in preds]
        else ["instance_id", "model_name_or_path"],
        "instances": results,
        "summary": {
            **_summary(graded),
            "resolved_ids": sorted(k for k, r in results.items() if r["resolved"]),
            "by_model": {m: _summary(rs) for m, rs in sorted(by_model.items())},
        },
    }
