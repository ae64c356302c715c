"""`assay serve-policy`: the mlp works out of the box; bad options are one-line errors."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
from typer.testing import CliRunner

from assay.cli.app import app

pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager:DeprecationWarning")


@pytest.mark.parametrize("args, message", [
    (["mlp", "--params", "{bad"], "--params is not valid JSON"),
    (["mlp", "--params", '{"hidden": "x"}'], "params.hidden"),
    (["nope"], "unknown builtin 'nope'"),
    (["remote:ws://127.0.0.1:1"], "already served"),
])
def test_bad_serve_options_are_one_line_errors(args, message):
    result = CliRunner().invoke(app, ["serve-policy", *args])
    assert result.exit_code == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_serve_policy_mlp_out_of_the_box_answers_the_openpi_client():
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "assay.cli.app", "serve-policy", "mlp", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).status == 200
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.2)
        client = WebsocketClientPolicy("127.0.0.1", port)
        contract = client.get_server_metadata()["contract"]
        assert contract["observations"] == {"observation/state": {"shape": [39], "dtype": "float32"}}
        reply = client.infer({"observation/state": np.zeros(39, np.float32), "prompt": "pick"})
        assert reply["actions"].shape == (1, 4) and np.all(np.isfinite(reply["actions"]))
        client._ws.close()  # openpi's client has no close()
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stderr.close()
