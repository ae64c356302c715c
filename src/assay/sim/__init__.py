"""Simulation: the SimEnv protocol, its backends (Meta-World v3, Gymnasium) and the task registry.

May import ``assay.spec`` only.
"""

from assay.sim.backends import Backend, backend
from assay.sim.factors import FACTORS, Factor, get_factor, resolve_variant, value_of
from assay.sim.gymnasium_env import GymnasiumEnv, gymnasium_task
from assay.sim.instructions import instruct
from assay.sim.metaworld_env import MetaWorldEnv, metaworld_task
from assay.sim.paraphrase import paraphrase
from assay.sim.perturbed import PerturbedEnv, perturbed
from assay.sim.protocol import (
    LayerValue,
    Observation,
    SimEnv,
    SupportsFramesOnDemand,
    SupportsLayerTrace,
    SupportsSimulator,
    Transition,
)
from assay.sim.registry import TaskRegistry, default_registry, make_env, tasks_kept
from assay.sim.render import RendererInfo, configure_gl, renderer_info
from assay.sim.safety import SafetyFilter
from assay.sim.semantic import conflict_marks
from assay.sim.together import SupportsSteppingTogether, innermost_steps_together, step_together
from assay.sim.wrapper import SimEnvWrapper

# MuJoCo's GL backend is chosen when assay.sim is imported (EGL on an NVIDIA device, else OSMesa): no module above
# imports mujoco (or a simulator package that does) at import time, so this still runs before mujoco is loaded.
configure_gl()

__all__ = [
    "Backend",
    "backend",
    "FACTORS",
    "Factor",
    "PerturbedEnv",
    "RendererInfo",
    "SafetyFilter",
    "conflict_marks",
    "get_factor",
    "instruct",
    "paraphrase",
    "perturbed",
    "resolve_variant",
    "value_of",
    "GymnasiumEnv",
    "LayerValue",
    "MetaWorldEnv",
    "Observation",
    "SimEnv",
    "SimEnvWrapper",
    "SupportsFramesOnDemand",
    "SupportsLayerTrace",
    "SupportsSimulator",
    "SupportsSteppingTogether",
    "innermost_steps_together",
    "step_together",
    "TaskRegistry",
    "configure_gl",
    "renderer_info",
    "Transition",
    "default_registry",
    "gymnasium_task",
    "make_env",
    "metaworld_task",
    "tasks_kept",
]
