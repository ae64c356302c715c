"""LIBERO's own instruction rewrites (set ``libero-language-v1``): the meaning kept, every level grammatical.

LIBERO's instructions are imperatives of one or two clauses (``pick up the alphabet soup and place it in the
basket``). A rewrite changes only a clause's leading verb, to a verb of the same action (``pick up`` ->
``grab``, ``place`` -> ``set``; ``sim/data/libero-language-v1.json``), and wraps the whole imperative in a
template that takes an imperative and gives one sentence; objects keep their names, so the goal object and
its destination are named at every level, and nothing is said about objects that are not there.
``libero_plus.language``'s levels, cumulative, each drawn from the episode seed:

=====  =========================================================================================
1      a polite padding around the instruction (``please ...``, ``..., and take your time``)
2      + verbs swapped for verbs of the same action, and another sentence form (a question, a
       wish, a declarative: ``could you please grab the alphabet soup and set it in the basket?``)
3      + one context sentence that names no object (``There is no need to hurry.``)
4      + two clauses made an explicit sequence (``first ..., and then ...``), two context sentences
5      + three context sentences, one before the request
=====  =========================================================================================

``synonyms`` is what ``instruction.synonym`` does to a LIBERO instruction: the verbs part swaps leading
verbs as above; the nouns part leaves the objects' names as they are (no LIBERO object has a declared true
synonym), so ``basket`` never becomes a ``hoop``.
"""

from __future__ import annotations

import functools
import json
import re
from importlib.resources import files
from typing import Any

import numpy as np

from assay.spec import derive_seed

LANGUAGE_SET = "libero-language-v1"


@functools.cache
def lexicon() -> dict[str, Any]:
    """The word lists and templates (package data)."""
    data: dict[str, Any] = json.loads((files("assay.sim") / "data" / f"{LANGUAGE_SET}.json").read_text())
    return data


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(derive_seed("libero-language", seed))


def _verbs() -> list[str]:
    return sorted(lexicon()["verbs"], key=len, reverse=True)  # "pick up" before "pick"


def _every_verb() -> list[str]:
    return sorted({v for options in lexicon()["verbs"].values() for v in options} | set(lexicon()["verbs"]),
                  key=len, reverse=True)


def clauses(text: str) -> list[str]:
    """The instruction's clauses: split at each ``and`` followed by one of the verbs or their rewrites (``the
    soup and the sauce`` stays one clause)."""
    pattern = r"\s+and\s+(?=(?:" + "|".join(re.escape(v) for v in _every_verb()) + r")\b)"
    return re.split(pattern, text.strip())


def leading_verb(clause: str) -> str | None:
    """The verb a clause starts with (one of the lexicon's), or None."""
    return next((v for v in _verbs() if clause == v or clause.startswith(v + " ")), None)


def _swap(clause: str, rng: np.random.Generator) -> str:
    verb = leading_verb(clause)
    if verb is None:
        return clause
    options = lexicon()["verbs"][verb]
    return options[int(rng.integers(len(options)))] + clause[len(verb):]


def synonyms(text: str, part: str, seed: int) -> str:
    """``instruction.synonym`` on a LIBERO instruction: ``verbs``/``both`` swap each clause's leading verb for
    one of the same action, drawn from the seed; ``nouns`` (and the nouns of ``both``) keep their names."""
    if part not in ("verbs", "both"):
        return text
    rng = _rng(seed)
    return " and ".join(_swap(clause, rng) for clause in clauses(text))


def _pick(rng: np.random.Generator, options: list[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _sentence(text: str) -> str:
    """The text as a sentence that ends in a full stop or a question mark."""
    return text if text.endswith(("?", ".")) else text + "."


def rewrite(text: str, level: int, seed: int) -> str:
    """The instruction at LIBERO-Plus-style language level ``level`` (module docstring), drawn from the seed."""
    if level <= 0:
        return text
    data, rng = lexicon(), _rng(seed)
    if level == 1:
        return _pick(rng, data["padding"]).format(imperative=text)
    parts = [_swap(clause, rng) for clause in clauses(text)]
    if level >= 4 and len(parts) == 2:
        imperative = data["sequence"].format(first=parts[0], second=parts[1])
    else:
        imperative = " and ".join(parts)
    request = _sentence(_pick(rng, data["forms"]).format(imperative=imperative))
    if level == 2:
        return request.rstrip(".")
    count = {3: 1, 4: 2}.get(level, 3)
    chosen = [data["context"][int(i)] for i in rng.choice(len(data["context"]), size=count, replace=False)]
    before = chosen[:1] if level >= 5 else []
    return " ".join([*before, request[0].upper() + request[1:], *chosen[len(before):]])
