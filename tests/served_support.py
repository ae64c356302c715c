"""A served simulator in a real process (``python -m assay.served``), for tests/test_served*.py."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROBOSUITE_PYTHON = ROOT / ".venv-robosuite" / "bin" / "python"


class Served:
    """A running ``assay.served`` process group: its URL, and ``kill()`` (SIGKILL to every process of it)."""

    def __init__(self, backend: str, port: int = 0, clients: int = 2, python: str = sys.executable,
                 env: dict[str, str] | None = None) -> None:
        paths = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), **(env or {})}
        environment.setdefault("MUJOCO_GL", "osmesa")
        self.process = subprocess.Popen(
            [python, "-m", "assay.served", backend, "--port", str(port), "--clients", str(clients)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=environment, start_new_session=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith("serving "), f"the server did not start: {line!r}"
        self.url = line.split(" on ", 1)[1].split(" ", 1)[0]
        self.port = int(self.url.rsplit(":", 1)[1])

    def kill(self) -> None:
        """SIGKILL the accepting process; its server processes die with it (PR_SET_PDEATHSIG)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()


@contextlib.contextmanager
def served(backend: str, **options: object) -> Iterator[Served]:
    """A served simulator for the block (killed after it)."""
    server = Served(backend, **options)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.kill()
