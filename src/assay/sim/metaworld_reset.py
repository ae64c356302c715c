"""An exact, faster hand reset for Meta-World's Sawyer environments.

Every Meta-World v3 ``reset`` moves the hand to its start twice (``SawyerXYZEnv.reset`` runs ``reset_model``
before and after Gymnasium's ``mj_resetData``), and each time ``_reset_hand`` steps the simulation 50 times
from Python: set the mocap target, check and set the gripper control, ``mj_step`` of 5 substeps, then
``mj_rnePostConstraint``. Nothing between those calls changes what the next one reads: the mocap target and the
control are set to the same values each time, and ``mj_rnePostConstraint`` only computes outputs (``cacc``,
``cfrc_int``, ``cfrc_ext``) that a step does not read. So setting them once, one ``mj_step`` of 250 substeps and
one ``mj_rnePostConstraint`` leave MuJoCo's data as the loop leaves it, bit for bit
(``tests/test_metaworld_reset.py`` compares every field of ``mjData`` after resets of the 47 tasks it is installed on,
and after the steps that follow).

It saves the loop's Python (a ``pick-place`` reset went from 9.6-11.1 to 8.2 ms back to back), and a reset
releases the GIL 4 times instead of about 200 (``mj_step`` and ``mj_rnePostConstraint`` release it): beside a thread
that writes files (the inline executor's writer), each release let that thread in and the stepping thread waited to
get it back, which made each reset ~2 ms slower still (docs/PERFORMANCE.md, Run K). The three tasks whose class
overrides ``_reset_hand`` (faucet open and close, window close: each sets a flag after the loop) keep Meta-World's
own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_HAND_QUAT = np.array([1, 0, 1, 0])  # Meta-World's mocap orientation, as it writes it each time
_GRIPPER_OPEN = (-1, 1)  # the control ``_reset_hand`` gives ``do_simulation``


def install(env: Any) -> bool:
    """Give ``env`` (a Meta-World ``SawyerXYZEnv``) the one-call hand reset, on this instance only; False (and
    nothing changed) where its class has its own ``_reset_hand`` or it has no mocap hand."""
    from metaworld.sawyer_xyz_env import SawyerXYZEnv

    if type(env)._reset_hand is not SawyerXYZEnv._reset_hand or env.model.nmocap < 1:
        return False

    def _reset_hand(steps: int = 50) -> None:
        if steps > 0:  # Meta-World's loop body, once, with all its substeps in one call
            data = env.data
            mocap_id = env.model.body_mocapid[data.body("mocap").id]
            data.mocap_pos[mocap_id][:] = env.hand_init_pos
            data.mocap_quat[mocap_id][:] = _HAND_QUAT
            env.do_simulation(_GRIPPER_OPEN, env.frame_skip * steps)  # its control check, one mj_step call
        env.init_tcp = env.tcp_center

    env._reset_hand = _reset_hand
    return True
