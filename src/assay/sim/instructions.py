"""The instruction an episode runs under: the backend's own rule, then every semantic factor, in order.

This is the instruction builder, above the task registry (a backend's rule comes
first: LIBERO-PRO's language) and above the text layer (``assay.sim.semantic``,
``assay.sim.paraphrase``) and LIBERO-Plus's language axis (``assay.sim.libero_plus``),
which composes the rest and so comes last. Nothing below imports it.
"""

from __future__ import annotations

from assay.sim.factors import value_of
from assay.sim.libero_language import synonyms as libero_synonyms
from assay.sim.libero_plus import plus_language
from assay.sim.paraphrase import paraphrase
from assay.sim.registry import instruction_for
from assay.sim.semantic import (
    conflicting_task,
    distractors,
    form,
    length,
    referring,
    rename_object,
    synonyms,
    template,
    typos,
    withheld,
)
from assay.spec import TaskSpec, Variant
from assay.spec.metaworld_catalog import METAWORLD_TASKS


def instruct(task: TaskSpec, variant: Variant, seed: int) -> str:
    """The instruction episode ``seed`` of ``task`` runs under, with every semantic factor of ``variant`` applied."""
    text = instruction_for(task, variant)
    other = conflicting_task(task, value_of(variant, "instruction.conflict"), seed)
    if other is not None:
        text = METAWORLD_TASKS[other][0]
    text = rename_object(text, value_of(variant, "instruction.object"), variant, seed)
    text = referring(text, value_of(variant, "instruction.referring"), variant, seed)
    part = value_of(variant, "instruction.synonym")
    text = libero_synonyms(text, part, seed) if task.backend == "libero" else synonyms(text, part, seed)
    text = paraphrase(text, value_of(variant, "instruction.paraphrase"), task.skill)
    text = form(text, value_of(variant, "instruction.form"))
    text = template(text, value_of(variant, "instruction.template"), seed)
    text = length(text, value_of(variant, "instruction.length"), seed)
    text = distractors(text, int(value_of(variant, "instruction.distractor")), seed)
    text = typos(text, float(value_of(variant, "instruction.typo_rate")), seed)
    text = plus_language(text, int(value_of(variant, "libero_plus.language")), seed)
    return withheld(task, text, value_of(variant, "instruction.withheld"), seed)
