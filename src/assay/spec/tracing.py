"""What a campaign may ask its per-layer trace to add: the opt-in groups of heavy trace fields.

Every episode records the cheap per-layer fields (``assay.store.trace`` declares them all); a campaign's
``trace: [group, ...]`` adds the heavy ones of each group named here. A group changes what is recorded,
never what happens (tracing reads the simulator and writes nothing into it), so it enters the episode key
as ``video_fps`` does: the same trajectory, another record.
"""

from __future__ import annotations

# group -> what it adds (the fields themselves are declared in assay.store.trace)
TRACE_GROUPS: dict[str, str] = {
    "physics.forces": "contact normal forces (sum and largest, N), the constraint rows, the largest constraint "
                      "violation and the solver's iterations of each step",
    "controller.effort": "the controller's effort: the force holding the hand to its target (Meta-World's mocap "
                         "weld) or the joint torques commanded (LIBERO's OSC), and how many are at their limit",
}


def check_trace_groups(groups: tuple[str, ...]) -> tuple[str, ...]:
    """``groups`` sorted and without repeats; ValueError naming the valid groups for an unknown one."""
    unknown = [g for g in groups if g not in TRACE_GROUPS]
    if unknown:
        raise ValueError(f"unknown trace group {', '.join(map(repr, unknown))}; valid: {', '.join(TRACE_GROUPS)} "
                         "(the cheap fields of every layer are always recorded)")
    return tuple(sorted(set(groups)))
