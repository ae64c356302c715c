"""``assay.store.step_matrix``: the one reader of a step column as a NumPy array, on golden cases."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from assay.errors import StoreError
from assay.store import build_table, step_matrix


def _fixed(rows: np.ndarray) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), rows.shape[1])


def test_fixed_size_list_column_is_a_steps_by_width_matrix():
    table = pa.table({"action": _fixed(np.array([[0.5, -1.0, 2.0], [3.0, 4.25, -0.0]]))})
    matrix = step_matrix(table, "action")
    assert matrix.dtype == np.float64 and matrix.shape == (2, 3)
    assert matrix.tolist() == [[0.5, -1.0, 2.0], [3.0, 4.25, -0.0]]


def test_variable_list_column_of_one_length_is_a_matrix():
    table = pa.table({"observation.state": pa.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])})
    assert step_matrix(table, "observation.state").tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]


def test_scalar_column_is_one_value_per_step_in_its_stored_type():
    table = pa.table({"reward": pa.array([0.0, 1.5, -2.0]), "success": pa.array([False, True, True]),
                      "step": pa.array([0, 1, 2], pa.int32())})
    assert step_matrix(table, "reward").tolist() == [0.0, 1.5, -2.0] and step_matrix(table, "reward").shape == (3,)
    assert step_matrix(table, "success").dtype == np.bool_
    assert step_matrix(table, "step").dtype == np.int32


def test_dtype_converts_as_numpy_would():
    table = pa.table({"action": _fixed(np.array([[0.1, 0.2]], np.float64)), "reward": pa.array([1], pa.int32())})
    assert step_matrix(table, "action", np.float32).tobytes() == np.array([[0.1, 0.2]]).astype(np.float32).tobytes()
    assert step_matrix(table, "reward", np.float64).dtype == np.float64


def test_empty_table_keeps_the_width_its_type_declares():
    table = pa.table({"action": _fixed(np.zeros((0, 4))), "state": pa.array([], pa.list_(pa.float64())),
                      "reward": pa.array([], pa.float64())})
    assert step_matrix(table, "action").shape == (0, 4)
    assert step_matrix(table, "state").shape == (0, 0)
    assert step_matrix(table, "reward").shape == (0,)


def test_chunked_column_reads_as_one_matrix():
    rows = np.arange(15, dtype=np.float64).reshape(5, 3)
    whole = _fixed(rows)
    table = pa.Table.from_batches([pa.record_batch({"action": whole.slice(0, 2)}),
                                   pa.record_batch({"action": whole.slice(2, 1)}),
                                   pa.record_batch({"action": whole.slice(3, 2)})])
    assert table.column("action").num_chunks == 3
    assert np.array_equal(step_matrix(table, "action"), rows)
    assert np.array_equal(step_matrix(table.slice(1, 3), "action"), rows[1:4])  # a sliced table: its own rows


def test_a_step_file_table_reads_back_bit_identical():
    state = np.random.default_rng(0).normal(size=(6, 5))
    columns = {"step": np.arange(6, dtype=np.int32), "t": np.arange(6) / 10, "observation.state": state,
               "action": state[:, :2] * 3, "reward": np.linspace(0, 1, 6), "success": np.zeros(6, bool),
               "terminated": np.zeros(6, bool), "truncated": np.zeros(6, bool)}
    table = build_table(columns, {"episode_key": "k" * 64})
    assert step_matrix(table, "observation.state").tobytes() == state.tobytes()
    assert step_matrix(table, "action").tobytes() == (state[:, :2] * 3).tobytes()


def test_a_missing_column_is_one_line_naming_it_and_the_columns_there():
    table = pa.table({"action": _fixed(np.zeros((1, 2))), "reward": pa.array([0.0])})
    with pytest.raises(StoreError) as caught:
        step_matrix(table, "observation.state")
    assert str(caught.value) == "step table has no column 'observation.state'; its columns: action, reward"
    named = table.replace_schema_metadata({b"episode_key": b"0123456789abcdef"})
    with pytest.raises(StoreError, match=r"^episode 0123456789ab has no column 'state'; its columns: action, "):
        step_matrix(named, "state")


def test_lists_of_several_lengths_or_null_steps_refuse():
    with pytest.raises(StoreError, match="'state' holds lists of 2 lengths"):
        step_matrix(pa.table({"state": pa.array([[1.0], [2.0, 3.0]])}), "state")
    with pytest.raises(StoreError, match="'state' has 1 null step"):
        step_matrix(pa.table({"state": pa.array([[1.0], None])}), "state")
