"""Reward curves as PNG files (matplotlib, headless): a training run's own, and the learning
benchmark's policy against its control."""

from __future__ import annotations

from pathlib import Path

__all__ = ["plot_reward_curves", "run_reward_curve"]


def plot_reward_curves(curves: dict[str, list[tuple[int, float]]], path: Path, title: str) -> str | None:
    """One line per named curve of (step, mean reward) points, saved to ``path``; returns why not
    when matplotlib is missing (it comes with ``pip install 'legorl[bench]'`` and the dev extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'legorl[bench]')"
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, points in curves.items():
        if points:
            ax.plot([s for s, _ in points], [r for _, r in points], marker="o", label=name)
    ax.set_xlabel("training step")
    ax.set_ylabel("mean rollout reward")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def run_reward_curve(run_dir: Path) -> Path | None:
    """RUN_DIR/reward_curve.png from the run's metrics; None (nothing written) without matplotlib
    or metrics."""
    from legorl.observe.metrics import read_metrics

    rows = read_metrics(run_dir)
    points = [(int(r["step"]), float(r["rollout/reward_mean"])) for r in rows if "rollout/reward_mean" in r]
    path = Path(run_dir) / "reward_curve.png"
    if not points or plot_reward_curves({"reward": points}, path, f"legorl train: {Path(run_dir).name}"):
        return None
    return path
