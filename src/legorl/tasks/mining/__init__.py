"""Training tasks mined from real repositories (``legorl tasks mine``; docs/tasks.md).

Modules, in the order data flows through them:

* :mod:`~legorl.tasks.mining.sources` — a local repository, a git bundle or a PyPI sdist, as a git
  repository of the miner's own and a head commit;
* :mod:`~legorl.tasks.mining.env` — the environment the repository declares, resolved with uv;
* :mod:`~legorl.tasks.mining.commits` — commits that change code and tests together;
* :mod:`~legorl.tasks.mining.mutations` — single-point bugs injected into covered functions;
* :mod:`~legorl.tasks.mining.testrun` — one test run in a sandbox, recorded by a pytest plugin, cached;
* :mod:`~legorl.tasks.mining.functions`, :mod:`~legorl.tasks.mining.patches` — what a line or a
  patch edits, by function, and the keys that make two changes the same;
* :mod:`~legorl.tasks.mining.decontam` — nothing a SWE-bench instance touches;
* :mod:`~legorl.tasks.mining.statement` — problem statements from test runs;
* :mod:`~legorl.tasks.mining.suite` — mined suites on disk;
* :mod:`~legorl.tasks.mining.pipeline` — all of it, validated in order, into a suite;
* :mod:`~legorl.tasks.mining.cli` — the command.
"""
