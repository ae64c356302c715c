"""An exact, faster hand reset for Meta-World's Sawyer environments.

Every Meta-World v3 ``reset`` moves the hand to its start twice (``SawyerXYZEnv.reset`` runs ``reset_model``
before and after Gymnasium's ``mj_resetData``), and each time ``_reset_hand`` steps the simulation 50 times
from Python: set the mocap target, check and set the gripper control, ``mj_step`` of 5 substeps, then
``mj_rnePostConstraint``. Between those calls nothing changes what the next one reads: ``mj_step`` leaves the mocap
target and the control as they were set, and ``mj_rnePostConstraint`` only computes outputs (``cacc``, ``cfrc_int``,
``cfrc_ext``) that a step does not read (no Meta-World model has a sensor). So setting them once, one ``mj_step`` of
250 substeps and one ``mj_rnePostConstraint`` leave MuJoCo's data as the loop leaves it, bit for bit
(``tests/test_metaworld_reset.py`` compares ``mjData``, all but its timers and the arrays MuJoCo leaves unwritten in
these models, after resets of the 47 tasks it is installed on, and after the steps that follow). One exception is
caught: a bad state (NaN, a huge value) makes ``mj_step`` reset the data, mocap target and control included, and
the loop sets them again within 5 substeps; when one of those warnings is raised inside the call, the state from
before it is put back and Meta-World's loop runs.

A reset's two hand moves make 8 MuJoCo calls instead of 200 (a whole ``pick-place`` reset: 11 instead of 203).
Each of the loop's calls released the GIL: beside a thread that writes files (the inline executor's writer), each
release let that thread in and the stepping thread waited to get the GIL back, which made a reset ~2 ms slower in a
campaign.
It also saves the loop's Python. Both are measured in docs/PERFORMANCE.md, Run K. The three tasks whose class
overrides ``_reset_hand`` (faucet open and close, window close: each sets an attribute after the loop) keep
Meta-World's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_HAND_QUAT = np.array([1, 0, 1, 0])  # Meta-World's mocap orientation, as it writes it each time
_GRIPPER_OPEN = (-1, 1)  # the control ``_reset_hand`` gives ``do_simulation``


def install(env: Any) -> bool:
    """Give ``env`` (a Meta-World ``SawyerXYZEnv``) the one-call hand reset, on this instance only; False (and
    nothing changed) where its class has its own ``_reset_hand`` or it has no mocap hand."""
    import mujoco  # here, not at import: ``assay.sim`` picks the GL backend before anything loads MuJoCo
    from metaworld.sawyer_xyz_env import SawyerXYZEnv

    if type(env)._reset_hand is not SawyerXYZEnv._reset_hand or env.model.nmocap < 1:
        return False
    state_kind = mujoco.mjtState.mjSTATE_INTEGRATION  # all a step reads: positions, velocities, mocap, control, ...
    # the warnings after which ``mj_step`` resets ``mjData`` (mocap target and control to their defaults)
    resetting = np.array([int(w) for w in (mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQVEL,
                                          mujoco.mjtWarning.mjWARN_BADQACC)])

    def _reset_hand(steps: int = 50) -> None:
        if steps > 0:  # Meta-World's loop body, once, with all its substeps in one call
            model, data = env.model, env.data
            start = np.empty(mujoco.mj_stateSize(model, state_kind))
            mujoco.mj_getState(model, data, start, state_kind)
            counts = data.warning.number[resetting]
            data.warning.number[resetting] = 0  # so that a reset inside the call shows, whatever came before
            mocap_id = model.body_mocapid[data.body("mocap").id]
            data.mocap_pos[mocap_id][:] = env.hand_init_pos
            data.mocap_quat[mocap_id][:] = _HAND_QUAT
            env.do_simulation(_GRIPPER_OPEN, env.frame_skip * steps)  # its control check, one mj_step call
            if data.warning.number[resetting].any():
                # MuJoCo reset the data mid-call; the loop would have set the target and control again within 5
                # substeps. It runs instead, from the same start: it meets the same reset at the same substep, which
                # zeroes every warning counter, so the counters need no restoring.
                mujoco.mj_setState(model, data, start, state_kind)
                SawyerXYZEnv._reset_hand(env, steps)
                return
            data.warning.number[resetting] = counts  # none raised: the counts as they were
        env.init_tcp = env.tcp_center

    env._reset_hand = _reset_hand
    return True
