"""Run: the closed-loop episode loop, the recorder, executors and campaign orchestration.

May import ``assay.spec``, ``assay.sim``, ``assay.policies`` and ``assay.store``; never metrics.

Every name is loaded on first use (PEP 562), as ``assay``'s are: a command that only registers a progress observer
(``assay.run.observers``) or reads a plan's types does not import the executors, the simulators or Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from assay.lazy import lazy_names

if TYPE_CHECKING:
    from assay.run.autosize import Sizing, size_run, usable_cores
    from assay.run.campaign import prepare_campaign, run_campaign
    from assay.run.closed_loop import rollout
    from assay.run.executors import Executor, InlineExecutor, LocalExecutor, make_executor
    from assay.run.faults import DEFAULT_EPISODE_TIMEOUT_S, FaultPolicy
    from assay.run.jobs import job_campaign
    from assay.run.observers import Observer, observing, phase
    from assay.run.plan import CampaignPlan, CampaignSummary
    from assay.run.recorder import EpisodeRecorder
    from assay.run.worker import Worker

_LAZY = {
    "assay.run.autosize": ("Sizing", "size_run", "usable_cores"),
    "assay.run.campaign": ("prepare_campaign", "run_campaign"),
    "assay.run.executors": ("Executor", "InlineExecutor", "LocalExecutor", "make_executor"),
    "assay.run.faults": ("DEFAULT_EPISODE_TIMEOUT_S", "FaultPolicy"),
    "assay.run.jobs": ("job_campaign",),
    "assay.run.observers": ("Observer", "observing", "phase"),
    "assay.run.plan": ("CampaignPlan", "CampaignSummary"),
    "assay.run.recorder": ("EpisodeRecorder",),
    "assay.run.closed_loop": ("rollout",),
    "assay.run.worker": ("Worker",),
}
__getattr__ = lazy_names(__name__, _LAZY, globals())

__all__ = [
    "Sizing",
    "size_run",
    "usable_cores",
    "DEFAULT_EPISODE_TIMEOUT_S",
    "CampaignPlan",
    "CampaignSummary",
    "EpisodeRecorder",
    "Executor",
    "FaultPolicy",
    "InlineExecutor",
    "LocalExecutor",
    "Observer",
    "Worker",
    "job_campaign",
    "make_executor",
    "observing",
    "phase",
    "prepare_campaign",
    "rollout",
    "run_campaign",
]
