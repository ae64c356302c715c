"""Object-storage data roots name the Assay extra that installs their fsspec package (issue 39): `--data s3://...`
used to fail with fsspec's "Install s3fs" and no extra provided it; now `pip install 'assay[s3]'` (or `[gcs]`)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from assay.errors import StoreError
from assay.store.roots import FsspecRoot, install_hint

pytest.importorskip("fsspec")


@pytest.mark.parametrize(("url", "message"), [
    ("s3://bucket/assay", "step data at s3://bucket/assay needs s3fs: pip install 'assay[s3]' (it installs s3fs)"),
    ("s3a://bucket/assay", "step data at s3a://bucket/assay needs s3fs: pip install 'assay[s3]' (it installs s3fs)"),
    ("gs://bucket/assay", "step data at gs://bucket/assay needs gcsfs: pip install 'assay[gcs]' (it installs gcsfs)"),
    ("gcs://bucket/assay", "step data at gcs://bucket/assay needs gcsfs: pip install 'assay[gcs]' (it installs "
                           "gcsfs)"),
])
def test_a_missing_object_store_package_names_its_extra(monkeypatch, url, message):
    monkeypatch.setitem(sys.modules, "s3fs", None)  # as if not installed, whether or not it is here
    monkeypatch.setitem(sys.modules, "gcsfs", None)
    with pytest.raises(StoreError) as missing:
        FsspecRoot(url)
    assert str(missing.value) == message


def test_without_fsspec_the_ray_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(StoreError, match=r"^step data at file:///tmp/x needs fsspec: pip install 'assay\[ray\]' "
                                         r"\(it installs fsspec\)$"):
        FsspecRoot("file:///tmp/x")
    assert install_hint("s3://b/p") == "pip install 'assay[s3]' (it installs s3fs)"


def test_the_extras_named_exist_and_ray_brings_its_client():
    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert any(dep.startswith("s3fs") for dep in extras["s3"])
    assert any(dep.startswith("gcsfs") for dep in extras["gcs"])
    assert any(dep.startswith("ray[client]") for dep in extras["ray"])
    assert any(dep.startswith("fsspec") for dep in extras["ray"])
