"""``assay serve-sim``, ``assay sim-parity`` and ``assay env create``: simulators as services (``assay.served``)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Annotated

import typer

from assay.cli import render
from assay.cli.lazy import subgroup
from assay.cli.options import user_errors
from assay.errors import AssayError, SpecError


def register(app: typer.Typer) -> None:
    """Add ``serve-sim``, ``sim-parity`` and ``env create`` to ``app``."""
    app.command("serve-sim")(serve_sim)
    app.command("sim-parity")(sim_parity)
    subgroup(app, "env", "A backend's own Python environment.").command("create")(env_create)


def serve_sim(
    backend: Annotated[str, typer.Argument(help="The backend to serve: metaworld, libero, gymnasium, robosuite.")],
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port (0: any free one).")] = 8710,
    clients: Annotated[int, typer.Option("--clients", min=1, max=256, help=(
        "Server processes, one campaign worker each (its environments are sessions on one connection); past them "
        "a client is refused E_BUSY."))] = 4,
    python: Annotated[str | None, typer.Option("--python", help=(
        "The Python to serve from (default: the backend's own environment when `assay env create` built one, "
        "else this one)."))] = None,
) -> None:
    """Serve BACKEND's environments to campaigns (`simulators: {BACKEND: ws://HOST:PORT}`), a process per client."""
    from assay.served import backend_of, environment_python

    with user_errors():
        facts = backend_of(backend)
        own = python or (str(environment_python(backend)) if environment_python(backend) else None)
        if own is None and facts.only_served:
            raise SpecError(f"{backend} runs in its own environment: build it first with `assay env create {backend}` "
                            f"(or `make env-{backend}`), or pass --python")
        argv = ["-m", "assay.served", backend, "--host", host, "--port", str(port), "--clients", str(clients)]
        if own is not None and os.path.realpath(own) != os.path.realpath(sys.executable):
            os.execv(own, [own, *argv])
        from assay.served.command import main

        raise typer.Exit(main(argv[2:]))


def sim_parity(
    backend: Annotated[str, typer.Argument(help="The backend served at --url.")],
    url: Annotated[str, typer.Option("--url", help="The served simulator, ws://HOST:PORT.")],
    tasks: Annotated[list[str] | None, typer.Option("--task", help="Task id (repeat; default: the backend's first).")]
    = None,
    episodes: Annotated[int, typer.Option("--episodes", min=1, help="Seeded episodes per task.")] = 5,
    steps: Annotated[int, typer.Option("--steps", min=1, help="At most this many steps per episode.")] = 100,
    seed: Annotated[int, typer.Option("--seed", min=0, help="The first episode's seed.")] = 0,
) -> None:
    """Run N seeded episodes in process and on the served simulator with the same actions; report the first
    difference (exit 1), or that every observation, reward, flag and info value was identical."""
    from assay.served import backend_of
    from assay.served.parity import sim_parity as compare
    from assay.sim import default_registry

    with user_errors():
        backend_of(backend)
        registry = default_registry()
        chosen = [registry.get(t) for t in tasks] if tasks else registry.list(backend=backend)[:1]
        wrong = [t.id for t in chosen if t.backend != backend]
        if wrong or not chosen:
            raise SpecError(f"--task {', '.join(wrong) or '(none)'}: give {backend} tasks (`assay tasks --backend "
                            f"{backend}`)")
        result = compare(chosen, url, episodes, steps, seed)
    if result.difference is not None:
        render.console.print(f"{result.episodes} episodes, {result.steps} steps compared; "
                             f"{result.difference.line()}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    render.console.print(f"identical: {result.episodes} episodes, {result.steps} steps of {', '.join(result.tasks)} "
                         f"in process and at {url} (observations, rewards, flags, info, initial conditions)",
                         highlight=False, soft_wrap=True)


def env_create(
    backend: Annotated[str, typer.Argument(help="A backend with an environment of its own (robosuite).")],
    python: Annotated[str, typer.Option("--python", help="The Python to build it with.")] = sys.executable,
) -> None:
    """Build BACKEND's own virtual environment from its lock file (`requirements/<lock>`, every package pinned by
    hash); `assay serve-sim BACKEND` then serves from it."""
    from assay.served import backend_of, checkout, environment_path, lock_path

    with user_errors():
        facts, lock = backend_of(backend), lock_path(backend)
        if lock is None:
            raise SpecError(f"{backend} runs in this environment (it has no lock of its own): `assay serve-sim "
                            f"{backend}` serves it from here; backends with their own: "
                            f"{', '.join(b for b, f in _own().items() if f)}")
        target = environment_path(facts.name)
        steps = [[python, "-m", "venv", str(target)],
                 [str(target / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--require-hashes",
                  "-r", str(lock)]]
        for step in steps:
            render.err_console.print(" ".join(step), highlight=False, soft_wrap=True)
            if subprocess.run(step, check=False).returncode != 0:
                raise AssayError(f"building {target} failed at `{' '.join(step)}` (its output is above)")
        site = subprocess.run([str(target / "bin" / "python"), "-c",
                               "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
        with open(os.path.join(site, "assay-checkout.pth"), "w", encoding="utf-8") as pth:  # Assay's own code
            pth.write(str(checkout() / "src") + "\n")
    render.console.print(f"built {target}: `assay serve-sim {backend}` serves from it", highlight=False)


def _own() -> dict[str, bool]:
    from assay.served import served_backends

    return {name: facts.lock is not None for name, facts in served_backends().items()}
