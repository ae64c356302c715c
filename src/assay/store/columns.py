"""One step column of an episode's step table as a NumPy array: the one reader every layer uses.

A vector column (a fixed-size list per step, as ``build_table`` writes it, or a list of one length per step)
becomes a ``(steps, width)`` matrix through Arrow's flatten and a reshape, never through Python lists; a scalar
column becomes a ``(steps,)`` array. The array is a read-only view of the table's memory where Arrow allows
one (a single chunk of floats without nulls) and a copy otherwise; pass ``dtype`` to have it in another type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import DTypeLike

from assay.errors import StoreError
from assay.lazy import deferred_module

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
else:  # loaded at first use: listing and scoring commands read the catalog only
    pa = deferred_module("pyarrow")
    pc = deferred_module("pyarrow.compute")

__all__ = ["step_matrix"]


def _which(table: pa.Table) -> str:
    key = (table.schema.metadata or {}).get(b"episode_key", b"").decode("utf-8", "replace")
    return f"episode {key[:12]}" if key else "step table"


def step_matrix(table: pa.Table, column: str, dtype: DTypeLike | None = None) -> np.ndarray:
    """``column`` of ``table`` (a pyarrow Table, its chunks in any number): ``(steps, width)`` for a list column,
    ``(steps,)`` for a scalar one, in the stored type or ``dtype``.

    With 0 steps a fixed-size list column is ``(0, width)`` (its width is in its type), a list column ``(0, 0)``.
    A missing column, a null step or lists of several lengths raise a one-line :class:`~assay.errors.StoreError`
    naming the column (and, for a missing one, the columns the table has).
    """
    names = table.column_names
    if column not in names:
        raise StoreError(f"{_which(table)} has no column {column!r}; its columns: {', '.join(names) or 'none'}")
    array = table.column(column).combine_chunks()
    kind = array.type
    if pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        if array.null_count:
            raise StoreError(f"{_which(table)}: step column {column!r} has {array.null_count} null step(s)")
        if pa.types.is_fixed_size_list(kind):
            width = kind.list_size
        else:
            lengths = np.unique(pc.list_value_length(array).to_numpy(zero_copy_only=False))
            if len(lengths) > 1:
                raise StoreError(f"{_which(table)}: step column {column!r} holds lists of {len(lengths)} lengths "
                                 f"({lengths.min()} to {lengths.max()}); a step matrix needs one width")
            width = int(lengths[0]) if len(lengths) else 0
        values = array.flatten().to_numpy(zero_copy_only=False).reshape(len(array), width)
    else:
        values = array.to_numpy(zero_copy_only=False)
    return values if dtype is None else np.asarray(values, dtype=dtype)
