"""The conformance kit for backend and policy authors, and fakes to build tests on.

Run ``check_sim_env(env, seeds)`` on a backend's environment and
``check_policy(policy, task)`` on a policy in your own tests; a finding raises
:class:`assay.errors.ConformanceError` whose message is one of the named
constants in ``assay.testing.env_checks`` / ``assay.testing.policy_checks``.

May import ``assay.spec``, ``assay.sim`` and ``assay.policies``.
"""

from assay.errors import ConformanceError
from assay.testing.env_checks import check_observation, check_sim_env, check_transition
from assay.testing.fakes import ConstantChunkPolicy, ConstantPolicy, FunctionEnv, ImageChunkPolicy, fake_task, running
from assay.testing.policy_checks import check_actions, check_policy, synthetic_observation

__all__ = [
    "ConformanceError",
    "ConstantChunkPolicy",
    "ConstantPolicy",
    "FunctionEnv",
    "ImageChunkPolicy",
    "check_actions",
    "check_observation",
    "check_policy",
    "check_sim_env",
    "check_transition",
    "fake_task",
    "running",
    "synthetic_observation",
]
