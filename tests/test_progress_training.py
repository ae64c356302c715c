"""Progress of training (epochs done of the total, per checkpoint): announced by the library, shown by the CLI
as plain lines without a terminal and as a bar on one."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from assay.cli.app import app
from assay.cli.progress import WorkProgress
from assay.run import observing

torch = pytest.importorskip("torch")

runner = CliRunner()

# Pendulum (classic control, numpy only: the fast tier allows it) and the random policy: a tiny store of
# 3 episodes x 10 steps, every one a timeout, so the data query takes outcome=any.
DEMOS = "name: demos\nseed: 0\nepisodes: 3\nhorizon: 10\ntasks: [gymnasium/Pendulum-v1]\npolicies: [random]\n"


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny")
    (root / "demos.yaml").write_text(DEMOS)
    result = runner.invoke(app, ["run", str(root / "demos.yaml"), "--store", str(root / "s"), "-x", "inline"])
    assert result.exit_code == 0, result.output
    return root / "s"


class Heard:
    """An observer that keeps what it is told of counted work."""

    def __init__(self) -> None:
        self.told: list[tuple[str, int, int, str]] = []

    def queued(self, episodes: int) -> None:
        raise AssertionError("training runs no episode")

    def finished(self, record) -> None:
        raise AssertionError("training runs no episode")

    def phase(self, text: str) -> None:
        raise AssertionError(f"training announces counted work, not a phase: {text}")

    def advanced(self, text: str, done: int, total: int, unit: str) -> None:
        self.told.append((text, done, total, unit))


def test_training_announces_zero_then_every_epoch_of_each_checkpoint(tiny_store, tmp_path):
    from assay.learning import TrainConfig, load_demos, train_bc
    from assay.store import Store

    with Store(tiny_store, create=False) as store:
        demos = load_demos(store, "campaign=demos,outcome=any")
    heard = Heard()
    with observing(heard):
        train_bc(demos, TrainConfig(epochs=3, hidden=(8,)), tmp_path / "first.pt")
        train_bc(demos, TrainConfig(epochs=2, hidden=(8,)), tmp_path / "second.pt")
    first = "training bc checkpoint first.pt on 3 demos (30 frames)"
    second = "training bc checkpoint second.pt on 3 demos (30 frames)"
    assert heard.told == [(first, 0, 3, "epochs"), (first, 1, 3, "epochs"), (first, 2, 3, "epochs"),
                              (first, 3, 3, "epochs"), (second, 0, 2, "epochs"), (second, 1, 2, "epochs"),
                              (second, 2, 2, "epochs")]


def test_train_bc_without_a_terminal_prints_epoch_lines_with_the_right_counts(tiny_store, tmp_path):
    out = tmp_path / "ckpt" / "bc.pt"
    result = runner.invoke(app, ["train-bc", "--data", "campaign=demos,outcome=any", "--out", str(out), "--store",
                                 str(tiny_store), "--epochs", "4", "--hidden", "8"])
    assert result.exit_code == 0, result.output
    head = "train-bc: training bc checkpoint bc.pt on 3 demos (30 frames): "
    lines = [line for line in result.stderr.splitlines() if line.startswith("train-bc:")]
    assert lines[0] == head + "0/4 epochs", lines
    assert re.fullmatch(re.escape(head) + r"4/4 epochs, done in \d+s", lines[-1]), lines
    # between the first and the last only a line every 30 s: none on a tiny store, or counts that go up
    middle = [int(re.match(re.escape(head) + r"(\d)/4 epochs, ETA \d+s$", line).group(1)) for line in lines[1:-1]]
    assert middle == sorted(middle) and all(0 < n < 4 for n in middle), lines
    assert "\x1b[" not in result.stderr
    assert "trained on 3 demos (30 frames" in result.stdout and out.is_file()


def test_plain_lines_for_counted_work_start_end_and_every_interval():
    screen = io.StringIO()
    progress = WorkProgress("zoo build", Console(file=screen, force_terminal=False, width=200), every=0.0)
    assert progress.plain
    for done in range(3):
        progress.advanced("training pixel-bc checkpoint tiny.pt on 2 demos (20 frames)", done, 2, "epochs")
    progress.advanced("training pixel-bc checkpoint full.pt on 4 demos (40 frames)", 0, 1, "epochs")
    progress.advanced("training pixel-bc checkpoint full.pt on 4 demos (40 frames)", 1, 1, "epochs")
    progress.close()
    lines = screen.getvalue().splitlines()
    assert [re.sub(r", (ETA|done in) \d+s$", "", line) for line in lines] == [
        "zoo build: training pixel-bc checkpoint tiny.pt on 2 demos (20 frames): 0/2 epochs",
        "zoo build: training pixel-bc checkpoint tiny.pt on 2 demos (20 frames): 1/2 epochs",
        "zoo build: training pixel-bc checkpoint tiny.pt on 2 demos (20 frames): 2/2 epochs",
        "zoo build: training pixel-bc checkpoint full.pt on 4 demos (40 frames): 0/1 epochs",
        "zoo build: training pixel-bc checkpoint full.pt on 4 demos (40 frames): 1/1 epochs",
    ]
    assert lines[1].endswith("s") and ", ETA " in lines[1] and ", done in " in lines[2]


def test_plain_lines_between_start_and_end_wait_for_the_interval():
    screen = io.StringIO()
    progress = WorkProgress("train-bc", Console(file=screen, force_terminal=False, width=200), every=3600.0)
    for done in range(101):
        progress.advanced("training bc checkpoint bc.pt on 9 demos (900 frames)", done, 100, "epochs")
    lines = screen.getvalue().splitlines()
    assert [line.split(": ")[-1].split(",")[0] for line in lines] == ["0/100 epochs", "100/100 epochs"]


def test_on_a_terminal_counted_work_is_a_bar_of_its_own_beside_the_episodes():
    from types import SimpleNamespace

    from assay.store import Outcome

    screen = io.StringIO()
    progress = WorkProgress("flywheel", Console(file=screen, force_terminal=True, width=200))
    assert not progress.plain
    progress.queued(2)
    progress.finished(SimpleNamespace(outcome=Outcome.SUCCESS, key="k1"))
    progress.advanced("training bc checkpoint arm.pt on 5 demos (250 frames)", 3, 7, "epochs")
    progress.close()
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    assert "flywheel: training bc checkpoint arm.pt on 5 demos (250 frames)" in drawn
    assert "3/7 epochs" in drawn and "1/2 episodes (queued so far)" in drawn and "success 1/1" in drawn


def test_a_command_that_only_trains_draws_no_episode_row_on_a_terminal():
    screen = io.StringIO()
    progress = WorkProgress("train-bc", Console(file=screen, force_terminal=True, width=200))
    progress.advanced("training bc checkpoint bc.pt on 3 demos (30 frames)", 2, 2, "epochs")
    progress.close()
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    assert "2/2 epochs" in drawn and "episodes" not in drawn


@pytest.mark.sim
@pytest.mark.slow
def test_a_zoo_build_announces_the_epochs_of_each_member_after_its_demos(tmp_path):
    from assay.learning.zoo import Member, ZooConfig, build_zoo
    from assay.store import Store

    told: list[tuple[object, ...]] = []

    class Everything:
        def queued(self, episodes: int) -> None:
            told.append(("queued", episodes))

        def finished(self, record) -> None:
            told.append(("finished",))

        def phase(self, text: str) -> None:
            told.append(("phase", text))

        def advanced(self, text: str, done: int, total: int, unit: str) -> None:
            told.append((text, done, total, unit))

    config = ZooConfig(tasks=("metaworld/reach@1",), demos=2, epochs=2, camera_size=32, horizon=100,
                       members=(Member("both", 1.0, 1.0, image_size=32), Member("one", 0.5, 0.5, image_size=32)))
    with Store(tmp_path / "s") as store, observing(Everything()):
        manifest = build_zoo(store, config)
    assert told[0] == ("queued", 2) and told.count(("finished",)) == 2
    trained = [entry for entry in told if len(entry) == 4]
    both, one = (m["demos"] for m in manifest["members"])  # the expert's successes, and half of them (at least 1)
    frames = {m["name"]: m["frames"] for m in manifest["members"]}
    first = f"training pixel-bc checkpoint both.pt on {both} demos ({frames['both']} frames)"
    second = f"training pixel-bc checkpoint one.pt on {one} demos ({frames['one']} frames)"
    assert trained == [(first, 0, 2, "epochs"), (first, 1, 2, "epochs"), (first, 2, 2, "epochs"),
                       (second, 0, 1, "epochs"), (second, 1, 1, "epochs")]
    assert told.index(trained[0]) > told.index(("finished",))  # training starts once the demos are in
