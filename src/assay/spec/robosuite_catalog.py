"""robosuite 1.5's own manipulation tasks as data: environment, instruction, skill, family, level, horizon.

They run only on a served simulator (``assay serve-sim robosuite``, in its own environment:
robosuite 1.5.2 conflicts with LIBERO's robosuite 1.4). ``object`` names the observable whose position is the
task's ``environment_state`` (and ``privileged.goal``), the object a scripted policy reaches for.
"""

from __future__ import annotations

# env name: (instruction, skill, family, level, horizon, object observable)
ROBOSUITE_TASKS: dict[str, tuple[str, str, str, str, int, str]] = {
    "Lift": ("lift the red cube off the table", "lift", "pick-place", "atomic", 200, "cube_pos"),
    "Stack": ("stack the red cube on the green cube", "stack", "pick-place", "composite", 300, "cubeA_pos"),
    "NutAssemblySquare": ("fit the square nut onto the square peg", "assemble", "insert", "composite", 400,
                          "SquareNut_pos"),
    "Door": ("open the door", "open", "open-close", "atomic", 300, "handle_pos"),
    "PickPlaceCan": ("pick up the can and place it in its bin", "pick-place", "pick-place", "composite", 400,
                     "Can_pos"),
}
ROBOSUITE_CONTROL_HZ = 20.0
ROBOSUITE_STATE_DIM = 9  # end-effector position (3) and quaternion (4), the two finger joints (2)
ROBOSUITE_CAMERAS = ("agentview", "frontview", "robot0_eye_in_hand")
