"""The 50 Meta-World v3 tasks as data: instruction, skill, family and level for each.

Instructions are written for people and language-conditioned policies alike; the
family groups tasks whose failures look alike (used by failure categories).
"""

from __future__ import annotations

# env name: (instruction, skill, family, level)
METAWORLD_TASKS: dict[str, tuple[str, str, str, str]] = {
    "assembly-v3": ("pick up the nut and place it onto the peg", "assemble", "insert", "composite"),
    "basketball-v3": ("pick up the ball and dunk it into the basket", "dunk", "pick-place", "composite"),
    "bin-picking-v3": (
        "grasp the puck in one bin and place it into the other bin", "pick-place", "pick-place", "composite"),
    "box-close-v3": ("pick up the lid and close the box with it", "close", "pick-place", "composite"),
    "button-press-topdown-v3": ("press the button from the top", "press", "press", "atomic"),
    "button-press-topdown-wall-v3": ("press the button behind the wall from the top", "press", "press", "atomic"),
    "button-press-v3": ("press the button", "press", "press", "atomic"),
    "button-press-wall-v3": ("press the button behind the wall", "press", "press", "atomic"),
    "coffee-button-v3": ("press the button on the coffee machine", "press", "press", "atomic"),
    "coffee-pull-v3": ("pull the mug away from the coffee machine", "pull", "pick-place", "composite"),
    "coffee-push-v3": ("push the mug under the coffee machine", "push", "push", "atomic"),
    "dial-turn-v3": ("turn the dial", "turn", "turn", "atomic"),
    "disassemble-v3": ("pick the nut off the peg", "disassemble", "insert", "composite"),
    "door-close-v3": ("close the door", "close", "open-close", "atomic"),
    "door-lock-v3": ("lock the door by turning the lock downwards", "lock", "turn", "atomic"),
    "door-open-v3": ("open the door", "open", "open-close", "atomic"),
    "door-unlock-v3": ("unlock the door by turning the lock", "unlock", "turn", "atomic"),
    "hand-insert-v3": ("insert the gripper into the hole", "insert", "insert", "atomic"),
    "drawer-close-v3": ("close the drawer", "close", "open-close", "atomic"),
    "drawer-open-v3": ("open the drawer", "open", "open-close", "atomic"),
    "faucet-open-v3": ("turn the faucet on by rotating it left", "turn", "turn", "atomic"),
    "faucet-close-v3": ("turn the faucet off by rotating it right", "turn", "turn", "atomic"),
    "hammer-v3": ("pick up the hammer and drive the nail into the wall", "hammer", "tool-use", "composite"),
    "handle-press-side-v3": ("press the handle down sideways", "press", "press", "atomic"),
    "handle-press-v3": ("press the handle down", "press", "press", "atomic"),
    "handle-pull-side-v3": ("pull the handle up sideways", "pull", "pull", "atomic"),
    "handle-pull-v3": ("pull the handle up", "pull", "pull", "atomic"),
    "lever-pull-v3": ("pull the lever up", "pull", "pull", "atomic"),
    "pick-place-wall-v3": (
        "pick up the puck and place it at the goal behind the wall", "pick-place", "pick-place", "composite"),
    "pick-out-of-hole-v3": ("pick the puck up out of the hole", "pick", "pick-place", "composite"),
    "pick-place-v3": ("pick up the puck and place it at the goal", "pick-place", "pick-place", "composite"),
    "plate-slide-v3": ("slide the plate into the cabinet", "slide", "push", "atomic"),
    "plate-slide-side-v3": ("slide the plate into the cabinet from the side", "slide", "push", "atomic"),
    "plate-slide-back-v3": ("slide the plate out of the cabinet", "slide", "push", "atomic"),
    "plate-slide-back-side-v3": ("slide the plate out of the cabinet sideways", "slide", "push", "atomic"),
    "peg-insert-side-v3": (
        "pick up the peg and insert it into the hole from the side", "insert", "insert", "composite"),
    "peg-unplug-side-v3": ("unplug the peg from the side", "unplug", "pull", "atomic"),
    "soccer-v3": ("kick the ball into the goal", "push", "push", "atomic"),
    "stick-push-v3": ("grasp the stick and push the box with it", "tool-use", "tool-use", "composite"),
    "stick-pull-v3": ("grasp the stick and pull the box with it", "tool-use", "tool-use", "composite"),
    "push-v3": ("push the puck to the goal", "push", "push", "atomic"),
    "push-wall-v3": ("push the puck to the goal around the wall", "push", "push", "atomic"),
    "push-back-v3": ("push the puck back to the goal", "push", "push", "atomic"),
    "reach-v3": ("reach the goal position", "reach", "reach", "atomic"),
    "reach-wall-v3": ("reach the goal position over the wall", "reach", "reach", "atomic"),
    "shelf-place-v3": ("pick up the puck and place it on the shelf", "pick-place", "pick-place", "composite"),
    "sweep-into-v3": ("sweep the puck into the hole", "sweep", "push", "atomic"),
    "sweep-v3": ("sweep the puck off the table", "sweep", "push", "atomic"),
    "window-open-v3": ("slide the window open", "open", "open-close", "atomic"),
    "window-close-v3": ("slide the window closed", "close", "open-close", "atomic"),
}

# Tasks on which the manipulated-object finder (``sim.metaworld_perturb.ModelPerturber.locate_object``:
# the non-robot body nearest to the object position Meta-World reports, within 0.1 m) finds no body:
# the reported position is a site on an articulated part (a button, a handle, a drawer front) or a
# nut's handle. ``object.mass`` and ``object.color`` have nothing to change there, so they are refused.
# Measured on every task over three seeds; tests/test_perturbations.py checks a sample (and all 50, slow).
NO_OBJECT_BODY: frozenset[str] = frozenset({
    "assembly-v3", "button-press-topdown-v3", "button-press-topdown-wall-v3", "button-press-v3",
    "button-press-wall-v3", "coffee-button-v3", "disassemble-v3", "door-close-v3", "door-open-v3",
    "drawer-close-v3", "drawer-open-v3", "faucet-close-v3", "faucet-open-v3", "handle-press-side-v3",
    "handle-press-v3", "handle-pull-side-v3", "handle-pull-v3", "lever-pull-v3", "window-open-v3",
})
