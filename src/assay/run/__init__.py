"""Run: the closed-loop episode loop, the recorder, executors and campaign orchestration.

May import ``assay.spec``, ``assay.sim``, ``assay.policies`` and ``assay.store``; never metrics.
"""

from assay.run.campaign import prepare_campaign, run_campaign
from assay.run.executors import Executor, InlineExecutor, LocalExecutor, make_executor
from assay.run.faults import DEFAULT_EPISODE_TIMEOUT_S, FaultPolicy
from assay.run.jobs import job_campaign
from assay.run.observers import Observer, observing, phase
from assay.run.plan import CampaignPlan, CampaignSummary
from assay.run.recorder import EpisodeRecorder
from assay.run.rollout import rollout
from assay.run.worker import Worker

__all__ = [
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
