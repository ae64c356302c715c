"""The semantic factors: deterministic rewrites of an episode's instruction (word lists ``semantic-v1``).

Every rewrite is a function of the task's nominal instruction, the variant and the
episode seed (a per-factor generator seeded by ``derive_seed``), so the same
episode always reads the same words and a sweep varies only what it declares.
The word lists and templates are package data (``sim/data/semantic-v1.json``):
changing them is a new set version, and the rewritten instruction is part of
every episode's key. ``assay.sim.instructions.instruct`` combines them in a fixed
order: the conflicting instruction replaces the words first, then the object is
renamed or referred to, words are swapped for synonyms, the existing paraphrase
styles apply, then form, template, length and distractor clauses, and character
noise last. This module is the text layer: it reads factor values
(``assay.sim.factors``) and calls no backend.

The *goal object* is the first object noun of the instruction (``the puck`` in
"pick up the puck and place it at the goal"; places such as the goal or a hole are
no object); an instruction with no object noun (``reach``, a Gymnasium task) is
left unchanged by the object-level factors (referring, object, object-first form).

``instruction.conflict`` makes the words name another Meta-World task of the
suite. A Meta-World scene holds one task, so the instructed task cannot be scored
there: such a task declares ``conflict_scoring: marked`` (the default), the episode
is scored by the scene's own task and marked (``conflict_marks``), and the robustness
tables keep it apart (axis ``semantic:conflict``). A task declaring ``instructed``
is refused for the factor by a backend that cannot score the instructed task.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from assay.errors import SpecError
from assay.sim.factors import value_of
from assay.spec import TaskSpec, Variant, derive_seed
from assay.spec.metaworld_catalog import METAWORLD_TASKS

SEMANTIC_SET = "semantic-v1"


@cache
def lexicon() -> dict[str, Any]:
    """The versioned word lists and templates."""
    text = resources.files("assay.sim").joinpath("data", f"{SEMANTIC_SET}.json").read_text(encoding="utf-8")
    data = json.loads(text)
    if data.get("version") != SEMANTIC_SET:
        raise SpecError(f"package data {SEMANTIC_SET}.json holds word lists {data.get('version')!r}; reinstall assay")
    return data


def _rng(factor: str, seed: int) -> np.random.Generator:
    return np.random.default_rng(derive_seed("instruction", factor, seed))


def _pick(rng: np.random.Generator, options: list[Any] | tuple[Any, ...]) -> Any:
    return options[int(rng.integers(len(options)))]


def _category(noun: str) -> str | None:
    for category, members in lexicon()["objects"].items():
        if noun in members:
            return category
    return None


def goal_object(text: str) -> tuple[int, str] | None:
    """(word index, noun) of the instruction's first object noun (places such as "the goal" are no object), or None."""
    for index, word in enumerate(text.split()):
        if _category(word) not in (None, "place"):
            return index, word
    return None


def _replace_object(text: str, phrase: str) -> str:
    """The goal object's noun phrase (``the`` + noun when preceded by an article) replaced by ``phrase``."""
    found = goal_object(text)
    if found is None:
        return text
    index, _ = found
    words = text.split()
    start = index - 1 if index > 0 and words[index - 1] in ("the", "a", "an") else index
    return " ".join(words[:start] + [phrase] + words[index + 1:])


def _colour_name(rgb: Any) -> str:
    colours = lexicon()["colours"]
    value = np.asarray(rgb, dtype=float)
    return min(colours, key=lambda name: float(np.sum((np.asarray(colours[name]) - value) ** 2)))


def synonyms(text: str, part: str, seed: int) -> str:
    """Verbs (a word leading a clause), object nouns or both swapped for a synonym drawn per word from the seed."""
    if part == "nominal":
        return text
    rng, words = _rng("instruction.synonym", seed), text.split()
    verbs, nouns = lexicon()["verbs"], lexicon()["nouns"]
    out = []
    for index, word in enumerate(words):
        if part in ("verbs", "both") and word in verbs and _leads(words, index):
            word = _pick(rng, verbs[word])
        elif part in ("nouns", "both") and word in nouns and not _leads(words, index):
            word = _pick(rng, nouns[word])
        out.append(word)
    return " ".join(out)


def _leads(words: list[str], index: int) -> bool:
    return index == 0 or words[index - 1] in ("and", "then", "by", "to")


def typos(text: str, rate: float, seed: int) -> str:
    """Each letter, with probability ``rate``: swapped with the next, dropped, doubled or hit as a neighbour key."""
    if rate <= 0:
        return text
    rng, keyboard = _rng("instruction.typo_rate", seed), lexicon()["keyboard"]
    chars, out, i = list(text), [], 0
    while i < len(chars):
        c = chars[i]
        if c.isalpha() and rng.random() < rate:
            op = int(rng.integers(4))
            if op == 0 and i + 1 < len(chars) and chars[i + 1].isalpha():
                out += [chars[i + 1], c]
                i += 2
                continue
            if op == 1:
                i += 1
                continue
            out += [c, c] if op == 2 else [_pick(rng, keyboard.get(c.lower(), c))]
        else:
            out.append(c)
        i += 1
    return "".join(out)


def length(text: str, style: str, seed: int) -> str:
    """Terse (function words dropped), verbose (a padding drawn from the seed), rambling, or as it was."""
    if style == "terse":
        dropped = set(lexicon()["function_words"])
        return " ".join(w for w in text.split() if w not in dropped) or text
    if style == "verbose":
        return _pick(_rng("instruction.length", seed), lexicon()["verbose"]).format(instruction=text)
    if style == "rambling":
        return lexicon()["rambling"][0].format(instruction=text)
    return text


def form(text: str, style: str) -> str:
    """The sentence in another form (declarative, question, wish) or with the goal object moved first."""
    if style == "imperative":
        return text
    if style == "object-first":
        found = goal_object(text)
        if found is None:
            return text
        words = text.split()
        index = found[0]
        start = index - 1 if index > 0 and words[index - 1] in ("the", "a", "an") else index
        subject = " ".join(words[start:index + 1])
        rest = " ".join(words[:start] + ["it"] + words[index + 1:])
        return lexicon()["forms"][style].format(object=subject, rest=rest)
    return lexicon()["forms"][style].format(instruction=text)


def distractors(text: str, count: int, seed: int) -> str:
    """``count`` distinct irrelevant clauses, drawn from the seed, appended."""
    if count <= 0:
        return text
    pool = lexicon()["distractors"]
    chosen = _rng("instruction.distractor", seed).choice(len(pool), size=count, replace=False)
    return ", ".join([text, *(pool[int(i)] for i in chosen)])


def referring(text: str, style: str, variant: Variant, seed: int) -> str:
    """The goal object named by a referring expression instead of its noun."""
    found = goal_object(text)
    if style == "nominal" or found is None:
        return text
    if style == "colour":
        return _replace_object(text, f"the {_colour_name(value_of(variant, 'object.color'))} object")
    if style == "spatial":
        return _replace_object(text, _pick(_rng("instruction.referring", seed), lexicon()["spatial"]))
    return _replace_object(text, lexicon()["functions"][_category(found[1])])


def rename_object(text: str, swap: str, variant: Variant, seed: int) -> str:
    """The goal object renamed: another object of its category, of another category, or given a wrong colour."""
    found = goal_object(text)
    if swap == "nominal" or found is None:
        return text
    index, noun = found
    rng, category = _rng("instruction.object", seed), _category(noun)
    objects = lexicon()["objects"]
    if swap == "wrong-colour":
        actual = _colour_name(value_of(variant, "object.color"))
        colour = _pick(rng, sorted(c for c in lexicon()["colours"] if c != actual))
        words = text.split()
        return " ".join(words[:index] + [colour, noun] + words[index + 1:])
    if swap == "same-category":
        pool = [n for n in objects[category] if n != noun]
    else:
        pool = [n for c, members in objects.items() if c not in (category, "place") for n in members]
    words = text.split()
    return " ".join(words[:index] + [_pick(rng, sorted(pool))] + words[index + 1:])


def conflicting_task(task: TaskSpec, style: str, seed: int) -> str | None:
    """The Meta-World env name the conflicting instruction names, or None (nominal, or not Meta-World)."""
    if style == "nominal" or task.env_name not in METAWORLD_TASKS:
        return None
    own_instruction, _, family, _ = METAWORLD_TASKS[task.env_name]
    same = style == "same-family"
    pool = sorted(env for env, (instruction, _, fam, _) in METAWORLD_TASKS.items()
                  if env != task.env_name and instruction != own_instruction and (fam == family) == same)
    return _pick(_rng("instruction.conflict", seed), pool) if pool else None


def withheld(task: TaskSpec, text: str, style: str, seed: int) -> str:
    """The instruction withheld: ``empty`` (no words), ``other-task`` (another task's instruction, of the same LIBERO
    suite or another Meta-World task, drawn from the seed; never one with the same words), else unchanged."""
    if style == "empty":
        return ""
    if style != "other-task":
        return text
    if task.backend == "libero":
        from assay.spec.libero_catalog import libero_catalog

        suite = task.env_name.partition("/")[0]
        pool = sorted({str(e["language"]) for e in libero_catalog().get(suite, ())} - {task.instruction})
    else:
        pool = sorted({instruction for instruction, *_ in METAWORLD_TASKS.values()} - {task.instruction})
    return str(_pick(_rng("instruction.withheld", seed), pool)) if pool else text


def conflict_marks(task: TaskSpec, variant: Variant, seed: int) -> dict[str, Any]:
    """What an episode under a conflicting instruction is marked with (empty when the words do not conflict)."""
    other = conflicting_task(task, value_of(variant, "instruction.conflict"), seed)
    if other is None:
        return {}
    return {"conflict_with": f"metaworld/{other.removesuffix('-v3')}", "scored_against": "scene",
            "scoring": task.conflict_scoring}


def template(text: str, style: str, seed: int) -> str:
    """The instruction set into an unseen template (style ``unseen``), else unchanged."""
    if style != "unseen":
        return text
    return str(_pick(_rng("instruction.template", seed), lexicon()["unseen_templates"]).format(instruction=text))
