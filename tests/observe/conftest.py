"""Fixtures of the observability tests: one real short training run per test session (see
runmaker.py), a live run made while a test watches, the UI served in the background, a browser."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import threading
from pathlib import Path

import pytest
from needs import unavailable
from runmaker import short_run

from legorl.observe.ui.server import BackgroundUI

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-step run (rollouts, trainer step, metrics, trainer logprobs), made once per session."""
    if shutil.which("bwrap") is None or shutil.which("strace") is None:
        unavailable("bubblewrap and strace are needed for the run the UI tests look at")
    run_dir = tmp_path_factory.mktemp("observe") / "trained"
    reuse = os.environ.get("LEGORL_TEST_TRAINED_RUN")  # a run made by `python tests/observe/runmaker.py DIR`
    if reuse:
        shutil.copytree(reuse, run_dir)
        return run_dir
    # on a thread of its own: the test that first asks for this run may already be running an event
    # loop on this one (Playwright's sync API does), and asyncio.run refuses to nest
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, short_run(run_dir, steps=2)).result()
    return run_dir


class LiveRun:
    """A short run going on in a background thread (rollouts appended while a test watches)."""

    def __init__(self, run_dir: Path, steps: int = 2) -> None:
        self.run_dir = run_dir
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, args=(steps,), daemon=True, name="live-run")

    def _main(self, steps: int) -> None:
        try:
            asyncio.run(short_run(self.run_dir, steps=steps, trainer_steps=False))
        except BaseException as exc:  # re-raised in join()
            self.error = exc

    def start(self) -> LiveRun:
        self._thread.start()
        for _ in range(6000):  # the gateway stack creates run.sqlite when it opens (a loaded CI box: minutes)
            if (self.run_dir / "run.sqlite").exists() or not self._thread.is_alive():
                break
            self._thread.join(0.1)
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float = 600) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the live run did not finish"
        if self.error is not None:
            raise self.error


@pytest.fixture
def live_run(tmp_path: Path):
    run = LiveRun(tmp_path / "live").start()
    yield run
    run.join()


# Module scope: Playwright's sync API keeps its event loop marked as running in the main thread
# while it is started, so any later test in the session that calls asyncio.run() would fail.
@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        unavailable("Debian's chromium is not installed (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install playwright)")
    with sync_playwright() as p:
        # Debian's chromium, never a downloaded browser; --no-sandbox: tests may run as root
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    yield pg
    ctx.close()


@pytest.fixture
def ui(trained_run: Path):
    with BackgroundUI([trained_run]) as server:
        yield server


@pytest.fixture(scope="session")
def shots() -> Path:
    """Where the browser tests save their screenshots (kept after the run: tests/observe/screenshots)."""
    d = Path(os.environ.get("LEGORL_SCREENSHOTS", Path(__file__).parent / "screenshots"))
    d.mkdir(parents=True, exist_ok=True)
    return d
