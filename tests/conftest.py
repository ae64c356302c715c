from __future__ import annotations

import textwrap
from pathlib import Path

import pytest


@pytest.fixture
def write_campaign(tmp_path: Path):
    """Write a campaign YAML into tmp_path and return its path."""

    def write(text: str, name: str = "campaign.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip())
        return path

    return write
