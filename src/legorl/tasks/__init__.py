"""Tasks: SWE-bench-compatible records, suites and their checks, and suites mined from real repositories."""

from legorl.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Task": "legorl.tasks.model",
        "builtin_suites": "legorl.tasks.loader",
        "get_task": "legorl.tasks.loader",
        "load_suite": "legorl.tasks.loader",
        "check_suite": "legorl.tasks.check",
        "check_task": "legorl.tasks.check",
        "MinedInfo": "legorl.tasks.model",
        "mine": "legorl.tasks.mining.pipeline",
        "MineOptions": "legorl.tasks.mining.pipeline",
    },
)
