"""Simulation: the SimEnv protocol, its backends (Meta-World v3, Gymnasium) and the task registry.

May import ``assay.spec`` only.
"""

from assay.sim.gymnasium_env import GymnasiumEnv, gymnasium_task
from assay.sim.metaworld_env import MetaWorldEnv, metaworld_task
from assay.sim.protocol import Observation, SimEnv, Transition
from assay.sim.registry import BACKENDS, TaskRegistry, default_registry, make_env

__all__ = [
    "BACKENDS",
    "GymnasiumEnv",
    "MetaWorldEnv",
    "Observation",
    "SimEnv",
    "TaskRegistry",
    "Transition",
    "default_registry",
    "gymnasium_task",
    "make_env",
    "metaworld_task",
]
