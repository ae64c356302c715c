"""Simulation: the SimEnv protocol, its backends (Meta-World v3, Gymnasium) and the task registry.

May import ``assay.spec`` only.
"""

from assay.sim.render import RendererInfo, configure_gl, renderer_info

configure_gl()  # before anything imports mujoco: EGL on an NVIDIA device, else OSMesa, unless chosen otherwise

from assay.sim.factors import FACTORS, Factor, get_factor, resolve_variant, value_of  # noqa: E402
from assay.sim.gymnasium_env import GymnasiumEnv, gymnasium_task  # noqa: E402
from assay.sim.metaworld_env import MetaWorldEnv, metaworld_task  # noqa: E402
from assay.sim.paraphrase import paraphrase  # noqa: E402
from assay.sim.perturbed import PerturbedEnv, perturbed  # noqa: E402
from assay.sim.protocol import Observation, SimEnv, SupportsFramesOnDemand, Transition  # noqa: E402
from assay.sim.registry import BACKENDS, TaskRegistry, default_registry, make_env, tasks_kept  # noqa: E402
from assay.sim.safety import SafetyFilter  # noqa: E402
from assay.sim.semantic import conflict_marks, instruct  # noqa: E402

__all__ = [
    "BACKENDS",
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
    "MetaWorldEnv",
    "Observation",
    "SimEnv",
    "SupportsFramesOnDemand",
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
