"""Fuzzing with hypothesis (issue 11, G5-G8): every bad input gives a clear one-line AssayError, never a crash.

Bounded: each property runs a fixed ``max_examples`` (the figures in
docs/RELIABILITY.md come from ``--hypothesis-show-statistics``); the tier runs in
well under a minute. Dashboard API fuzzing is not here yet (see the doc).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import msgpack
import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from assay.errors import AssayError, ResultsCsvError, SpecError
from assay.metrics.results_csv import read_results_csv
from assay.policies.remote import WireError, packb, unpackb
from assay.spec import CampaignSpec, load_campaign
from tests.remote_support import serving, state_task

# Derandomized with no example database: the same cases every run, so a figure or a failure reproduces.
FAST = settings(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                    st.text(max_size=20))
yaml_data = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=5)), max_leaves=20)

VALID = {"name": "fuzz", "seed": 1, "episodes": 2, "tasks": ["metaworld/reach@1"], "policies": ["expert", "random"]}
FIELDS = sorted(CampaignSpec.model_fields) + ["policies", "variants", "unknown_field"]


def _one_line(exc: BaseException) -> None:
    text = str(exc)
    assert text and "\n" not in text and "Traceback" not in text, text


def _load(text: str) -> CampaignSpec | None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "campaign.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            return load_campaign(path)
        except SpecError as exc:
            _one_line(exc)
            assert str(path) in str(exc)  # the error names the file
            return None


@settings(FAST, max_examples=150)
@given(yaml_data)
def test_any_yaml_document_is_a_spec_or_a_one_line_spec_error(data):
    _load(yaml.safe_dump(data, allow_unicode=True))


@settings(FAST, max_examples=150)
@given(st.sampled_from(FIELDS), yaml_data, st.booleans())
def test_a_valid_campaign_with_one_field_replaced_or_removed(field, value, remove):
    data = dict(VALID)
    if remove:
        data.pop(field, None)
    else:
        data[field] = value
    _load(yaml.safe_dump(data, allow_unicode=True))


@settings(FAST, max_examples=150)
@given(st.text(max_size=300))
def test_arbitrary_text_as_campaign_yaml(text):
    _load(text)


def _csv(text: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "results.csv"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        try:
            entries = read_results_csv(path)
        except ResultsCsvError as exc:
            _one_line(exc)
            return
        for entry in entries:  # what it accepts is well formed
            assert entry.task and entry.policy


cell = st.one_of(st.text(max_size=8), st.integers(-5, 50).map(str), st.floats(-1, 2).map(repr),
                 st.sampled_from(["", " ", "nan", "inf", "1e308", "-0", "3.5", '"a,b"']))


@settings(FAST, max_examples=200)
@given(st.lists(st.sampled_from(["task", "policy", "successes", "trials", "success_rate", "extra", ""]),
                min_size=0, max_size=6),
       st.lists(st.lists(cell, max_size=7), max_size=6))
def test_results_csv_with_random_header_and_cells(header, rows):
    _csv("\n".join([",".join(header)] + [",".join(r) for r in rows]))


@settings(FAST, max_examples=150)
@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=300))
def test_results_csv_as_arbitrary_text(text):
    _csv(text)


ndarray_headers = st.fixed_dictionaries({
    b"__ndarray__": st.one_of(st.just(True), scalars),
    b"data": st.one_of(st.binary(max_size=64), scalars),
    b"dtype": st.one_of(st.sampled_from(["<f8", "<f4", "|O", "<U4", "V8", "<i8", "bogus", "|b1"]), scalars),
    b"shape": st.one_of(st.lists(st.integers(-3, 10**12), max_size=4), scalars),
})
frames = st.one_of(
    st.binary(max_size=200),
    yaml_data.map(lambda d: msgpack.packb(d, use_bin_type=True)),
    ndarray_headers.map(msgpack.packb),
    st.dictionaries(st.sampled_from(["observation/state", "prompt", "x"]),
                    st.one_of(ndarray_headers, scalars), max_size=3).map(msgpack.packb),
)


@settings(FAST, max_examples=500)
@given(frames)
def test_unpackb_gives_a_value_or_a_wire_error(frame):
    try:
        unpackb(frame)
    except WireError as exc:
        _one_line(exc)


class Zeros:
    def reset(self, context) -> None:
        pass

    def act(self, observations):
        return np.zeros((len(observations["state"]), 4))


@pytest.fixture(scope="module")
def server():
    with serving(Zeros(), state_task(), max_message_bytes=64 * 1024) as running:
        yield running


def _valid_round_trip(port: int) -> None:
    with connect(f"ws://127.0.0.1:{port}") as ws:
        ws.recv()
        ws.send(packb({"observation/state": np.zeros(39), "prompt": "do it"}))
        reply = unpackb(ws.recv())
        assert reply["actions"].shape[-1] == 4


@settings(FAST, max_examples=120)
@given(st.one_of(frames, st.text(max_size=50), st.integers(65 * 1024, 200 * 1024).map(lambda n: b"\x00" * n)))
def test_policy_server_answers_bad_frames_with_a_protocol_error_and_stays_up(server, frame):
    with connect(f"ws://127.0.0.1:{server.port}", max_size=None) as ws:
        ws.recv()  # metadata
        ws.send(frame)
        try:
            reply = ws.recv(timeout=10)
        except ConnectionClosed as closed:
            assert closed.rcvd is not None and closed.rcvd.code == 1009, closed  # frame over the size cap
            event("closed 1009 (too big)")
        else:
            if isinstance(reply, str):  # refused: a protocol error naming the problem, then close 1008
                assert reply.startswith("E_PROTOCOL: ") and "\n" not in reply, reply
                with pytest.raises(ConnectionClosed) as closed:
                    ws.recv(timeout=10)
                assert closed.value.rcvd.code == 1008
                event("protocol error, closed 1008")
            else:  # the fuzzer wrote a valid request: it gets actions
                assert unpackb(reply)["actions"].shape[-1] == 4
                event("valid request answered")
    _valid_round_trip(server.port)  # the server survived


def test_huge_declared_array_is_refused_without_allocating(server):
    frame = msgpack.packb({"observation/state": {b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "<f8",
                                                  b"shape": [10**12, 10**6]}})
    with connect(f"ws://127.0.0.1:{server.port}") as ws:
        ws.recv()
        ws.send(frame)
        assert ws.recv(timeout=10).startswith("E_PROTOCOL: ")
    _valid_round_trip(server.port)


@settings(FAST, max_examples=40)
@given(st.one_of(st.text(max_size=40), st.text(max_size=30).map("gymnasium/".__add__),
                 st.text(max_size=30).map("metaworld/".__add__)))
def test_task_references_resolve_or_raise_an_assay_error(ref):
    from assay.sim import default_registry

    try:
        default_registry().get(ref)
    except AssayError as exc:
        _one_line(exc)
