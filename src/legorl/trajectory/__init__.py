"""Trajectories: Turn/Sample/Rollout records, the run store and export."""

from legorl.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AlignmentEvent": "legorl.trajectory.records",
        "Flag": "legorl.trajectory.records",
        "GraderReport": "legorl.trajectory.records",
        "Rollout": "legorl.trajectory.records",
        "Sample": "legorl.trajectory.records",
        "Turn": "legorl.trajectory.records",
        "build_samples": "legorl.trajectory.builder",
        "RunStore": "legorl.trajectory.store",
        "open_run": "legorl.trajectory.store",
        "export_run": "legorl.trajectory.export",
    },
)
