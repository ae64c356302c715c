"""LIBERO's own language perturbations: over every LIBERO instruction, every level and several seeds, the goal
objects and their destinations are still named, only verbs of the same action change, and each rewrite is one
grammatical composition of a template around the whole imperative (never a template inside another)."""

from __future__ import annotations

import re

import pytest

from assay.sim import instruct
from assay.sim.factors import resolve_variant
from assay.sim.libero_env import libero_tasks
from assay.sim.libero_language import clauses, leading_verb, lexicon, rewrite, synonyms
from assay.sim.libero_plus import plus_language

INSTRUCTIONS = sorted({task.instruction for task in libero_tasks()})
SEEDS = range(5)
METAWORLD_NOUNS = ("hoop", "net", "ring", "disc", "sphere", "compartment")


def _remainders(text: str) -> list[str]:
    """What follows each clause's leading verb: the goal object and where it goes (``the alphabet soup``,
    ``it in the basket``)."""
    out = []
    for clause in clauses(text):
        verb = leading_verb(clause)
        assert verb is not None, f"{text!r}: clause {clause!r} starts with no known verb"
        out.append(clause[len(verb):].strip())
    return out


def test_every_libero_instruction_is_an_imperative_of_known_verbs():
    assert len(INSTRUCTIONS) == 112
    for text in INSTRUCTIONS:
        assert all(_remainders(text)), text
    assert clauses("put both the alphabet soup and the tomato sauce in the basket") == [
        "put both the alphabet soup and the tomato sauce in the basket"]
    assert clauses("turn on the stove and put the moka pot on it") == ["turn on the stove", "put the moka pot on it"]


@pytest.mark.parametrize("level", range(6))
def test_each_level_names_the_goal_objects_and_their_destinations_grammatically(level):
    data = lexicon()
    verbs = {v for options in data["verbs"].values() for v in options}
    for text in INSTRUCTIONS:
        for seed in SEEDS:
            out = plus_language(text, level, seed)
            assert out == rewrite(text, level, seed) == plus_language(text, level, seed)  # the same per seed
            for remainder in _remainders(text):
                assert remainder in out, (level, seed, text, out)  # the object and its destination are named
            for noun in METAWORLD_NOUNS:
                assert re.search(rf"\b{noun}\b", out) is None or noun in text, (out, noun)
            if level == 0:
                assert out == text
                continue
            request = out
            for sentence in data["context"]:
                request = request.replace(sentence, "").strip()
            if level >= 3:
                request = request[0].lower() + request[1:]
            templates = data["padding"] if level == 1 else data["forms"]
            matches = []
            for template in templates:
                pattern = re.escape(template).replace(re.escape("{imperative}"), "(?P<imp>.+)")
                found = re.fullmatch(pattern + (r"\.?" if level >= 3 else ""), request)
                if found:
                    matches.append(found.group("imp"))
            assert len(matches) >= 1, (level, out)  # one template around the whole imperative ...
            imperative = matches[0]
            for template in (*data["padding"], *data["forms"]):  # ... and never a template inside another
                head = template.split("{imperative}")[0].strip()
                assert not head or not imperative.startswith(head), (level, out)
            sequence = re.fullmatch(r"first (.+), and then (.+)", imperative)
            parts = list(sequence.groups()) if sequence else clauses(imperative)
            assert len(parts) == len(clauses(text)), (text, out)
            for part, original in zip(parts, clauses(text), strict=True):
                verb = leading_verb(original)
                swapped = next(v for v in sorted(verbs, key=len, reverse=True) if part.startswith(v + " "))
                assert swapped in data["verbs"][verb], (original, part)  # a verb of the same action
                assert part[len(swapped):].strip() == original[len(verb):].strip()


def test_levels_differ_and_are_drawn_from_the_seed():
    text = "pick up the alphabet soup and place it in the basket"
    rewrites = [rewrite(text, level, 3) for level in range(6)]
    assert len(set(rewrites)) == 6
    assert len({rewrite(text, 5, seed) for seed in range(10)}) > 1
    assert rewrite(text, 2, 0) != "could you please the robot should grab up the alphabet soup and drop it in the net"


def test_instruction_synonym_on_a_libero_task_swaps_verbs_only():
    task = next(t for t in libero_tasks() if t.instruction == "pick up the alphabet soup and place it in the basket")
    for part in ("verbs", "nouns", "both"):
        variant = resolve_variant({"instruction.synonym": part}, task)
        for seed in SEEDS:
            out = instruct(task, variant, seed)
            assert "the alphabet soup" in out and "it in the basket" in out, out
            assert not any(re.search(rf"\b{n}\b", out) for n in METAWORLD_NOUNS), out
            if part == "nouns":
                assert out == task.instruction
    assert synonyms("pick up the book and place it in the back compartment of the caddy", "nouns", 0) == \
        "pick up the book and place it in the back compartment of the caddy"
