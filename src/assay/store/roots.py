"""Where step files live: one interface over a local directory and an fsspec URL.

A store's data root is a local directory (a ``Path``) or, for a cluster, any fsspec
URL (``s3://bucket/prefix``, ``gs://...``, ``file:///shared/...``) that every node
reaches; an object store needs its fsspec package (``pip install 'assay[s3]'`` or ``'assay[gcs]'``).
:func:`open_root` gives either as a :class:`DataRoot`; the episode and
video modules write and read through it and never ask which kind they hold.

Writes are atomic: to a temporary name beside the target (``.tmp-<host>-<pid>``),
then renamed; on an object store (no rename) the single PUT is the atomic step.
"""

from __future__ import annotations

import errno
import hashlib
import os
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from assay.errors import StoreError, WriteError

Root = str | Path
TMP_MARK = ".tmp-"
LISTED = 16  # from this many files asked of one folder, an fsspec root lists the folder instead of asking each


def is_url(root: Root) -> bool:
    """Whether ``root`` names an fsspec URL rather than a local directory."""
    return isinstance(root, str) and "://" in root


def as_root(root: Root) -> Root:
    """A URL stays a string; anything else becomes a ``Path``."""
    return root if isinstance(root, str) and is_url(root) else Path(root)


def local_path(root: Root) -> Path | None:
    """The local directory ``root`` names (a path or a ``file://`` URL), or None for any other URL."""
    if not is_url(root):
        return Path(root)
    text = str(root)
    return Path(text[len("file://"):]).expanduser() if text.startswith("file://") else None


def tmp_suffix() -> str:
    """This process's temporary-name suffix (dead writers' temporaries are found by it)."""
    return f"{TMP_MARK}{socket.gethostname()}-{os.getpid()}"


class DataRoot(Protocol):
    """A place files are written atomically and read back, named by paths relative to it."""

    def write(self, relpath: str, data: bytes) -> str:
        """Write ``data`` at ``relpath`` atomically; return its sha256 (StoreError when it cannot)."""

    def read(self, relpath: str) -> bytes:
        """The file's bytes; FileNotFoundError when it is not there."""

    def sha256(self, relpath: str) -> str:
        """The file's sha256; FileNotFoundError when missing, OSError when unreadable."""

    def create(self, relpath: str, data: bytes) -> bool:
        """Write ``data`` at ``relpath`` only if no file is there, deciding in one step (an exclusive create, never a
        check and then a write): True when this call created it, False when a file was there (StoreError when it
        cannot write)."""

    def where(self, relpath: str) -> str:
        """How messages name the file."""

    def exists(self, relpath: str) -> bool:
        """Whether a file is at ``relpath``."""

    def sizes(self, relpaths: Iterable[str]) -> dict[str, int | None]:
        """Each file's size in bytes, None where it is missing: metadata only, no file is read (a listing per
        folder where many are asked for, so an object store answers a folder per request, not a file)."""

    def glob(self, pattern: str) -> list[str]:
        """The relative paths of the files matching ``pattern`` (relative, with ``*``), sorted."""

    def temporaries(self, folders: tuple[str, ...]) -> list[str]:
        """Names of temporaries in ``folder/*/`` for each folder."""

    def remove(self, name: str) -> None:
        """Delete one name returned by :meth:`temporaries`."""

    def delete(self, relpath: str) -> None:
        """Delete the file at ``relpath`` (nothing when it is not there)."""


# The Assay extra that installs each object store's fsspec implementation (pyproject.toml).
PROTOCOL_EXTRAS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs")}


def _package(url: str) -> str | None:
    return PROTOCOL_EXTRAS.get(url.partition("://")[0].lower(), (None, None))[0]


def install_hint(url: str, error: ImportError | None = None) -> str:
    """The install command a data root at ``url`` needs: the extra for its protocol (``s3://``: ``assay[s3]``,
    ``gs://``: ``assay[gcs]``), else fsspec's own advice (``error``), else ``assay[ray]`` (fsspec itself)."""
    extra = PROTOCOL_EXTRAS.get(url.partition("://")[0].lower())
    if extra is not None:
        return f"pip install 'assay[{extra[1]}]' (it installs {extra[0]})"
    if error is not None and str(error):
        return f"{str(error).splitlines()[0]} (no Assay extra provides it)"
    return "pip install 'assay[ray]' (it installs fsspec)"


class LocalRoot:
    """A local directory."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, relpath: str, data: bytes) -> str:
        """Write ``data`` to ``relpath`` atomically (a temporary beside it, then a rename); returns where it is."""
        final = self.path / relpath
        tmp = final.with_name(f"{final.name}{tmp_suffix()}")
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            os.replace(tmp, final)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise WriteError(str(final), str(exc.strerror or exc)) from None
        return hashlib.sha256(data).hexdigest()

    def read(self, relpath: str) -> bytes:
        """The bytes at ``relpath``."""
        return (self.path / relpath).read_bytes()

    def create(self, relpath: str, data: bytes) -> bool:
        """Write ``data`` at ``relpath`` unless a file is there: a complete temporary, then a hard link to the name,
        which the kernel refuses when the name exists (so a reader never sees a half-written file)."""
        final = self.path / relpath
        tmp = final.with_name(f"{final.name}{tmp_suffix()}")
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            try:
                os.link(tmp, final)
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV):  # no hard links here: O_EXCL
                    raise
                return _create_exclusive(final, data)
            return True
        except OSError as exc:
            raise WriteError(str(final), str(exc.strerror or exc)) from None
        finally:
            tmp.unlink(missing_ok=True)

    def sha256(self, relpath: str) -> str:
        """The SHA-256 of the file at ``relpath``, read in chunks."""
        digest = hashlib.sha256()
        with open(self.path / relpath, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        return digest.hexdigest()

    def where(self, relpath: str) -> str:
        """The full path of ``relpath``, for messages."""
        return str(self.path / relpath)

    def exists(self, relpath: str) -> bool:
        """Whether a file exists at ``relpath``."""
        return (self.path / relpath).is_file()

    def sizes(self, relpaths: Iterable[str]) -> dict[str, int | None]:
        """The size of each file (None where there is none)."""
        found: dict[str, int | None] = {}
        base = f"{self.path}{os.sep}"  # joined as text: a million Path objects cost more than the stats themselves
        for relpath in relpaths:
            try:
                found[relpath] = os.stat(base + relpath).st_size
            except OSError:  # missing, or a path through a file: either way not a step file there
                found[relpath] = None
        return found

    def glob(self, pattern: str) -> list[str]:
        """The files matching ``pattern``, relative to the root, sorted."""
        return sorted(p.relative_to(self.path).as_posix() for p in self.path.glob(pattern) if p.is_file())

    def temporaries(self, folders: tuple[str, ...]) -> list[str]:
        """The temporaries an interrupted write left in ``folders``."""
        return [str(p) for folder in folders for p in (self.path / folder).glob(f"*/*{TMP_MARK}*")]

    def remove(self, name: str) -> None:
        """Remove the temporary ``name`` (as ``temporaries`` named it)."""
        Path(name).unlink(missing_ok=True)

    def delete(self, relpath: str) -> None:
        """Delete the file at ``relpath`` if there is one."""
        (self.path / relpath).unlink(missing_ok=True)


class FsspecRoot:
    """An fsspec URL: the file is built in memory and written whole."""

    def __init__(self, url: str) -> None:
        try:
            import fsspec
        except ImportError:
            raise StoreError(f"step data at {url} needs fsspec: {install_hint(url)}") from None
        try:
            self.fs, base = fsspec.core.url_to_fs(url)
        except ImportError as exc:  # the protocol's package (s3fs, gcsfs) is not installed
            raise StoreError(f"step data at {url} needs {_package(url) or 'its fsspec implementation'}: "
                             f"{install_hint(url, exc)}") from None
        except ValueError as exc:
            raise StoreError(f"cannot open step-data location {url}: {exc}") from None
        self.url, self.base = url, base.rstrip("/")
        protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        self.renames = protocol in ("file", "local")  # object stores have no rename: one PUT is atomic

    def write(self, relpath: str, data: bytes) -> str:
        """Write ``data`` to ``relpath`` whole (through a temporary and a move where the filesystem renames)."""
        final = f"{self.base}/{relpath}"
        try:
            self.fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
            if self.renames:
                tmp = final + tmp_suffix()
                self.fs.pipe_file(tmp, data)
                self.fs.mv(tmp, final)
            else:
                self.fs.pipe_file(final, data)
        except OSError as exc:
            raise WriteError(f"{self.url}/{relpath}", str(exc)) from None
        return hashlib.sha256(data).hexdigest()

    def read(self, relpath: str) -> bytes:
        """The bytes at ``relpath``."""
        data: bytes = self.fs.cat_file(f"{self.base}/{relpath}")
        return data

    def create(self, relpath: str, data: bytes) -> bool:
        """Write ``data`` at ``relpath`` unless a file is there: on a local filesystem as :class:`LocalRoot` does,
        elsewhere by fsspec's ``pipe_file(mode="create")`` (an object store's conditional write where its fsspec
        implementation has one, e.g. S3's ``If-None-Match``)."""
        if self.renames:
            return LocalRoot(Path(self.base)).create(relpath, data)
        final = f"{self.base}/{relpath}"
        try:
            self.fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
            self.fs.pipe_file(final, data, mode="create")
        except FileExistsError:
            return False
        except OSError as exc:
            raise WriteError(f"{self.url}/{relpath}", str(exc)) from None
        return True

    def sha256(self, relpath: str) -> str:
        """The SHA-256 of the file at ``relpath``."""
        return hashlib.sha256(self.read(relpath)).hexdigest()

    def where(self, relpath: str) -> str:
        """The URL of ``relpath``, for messages."""
        return f"{self.url}/{relpath}"

    def exists(self, relpath: str) -> bool:
        """Whether a file exists at ``relpath``."""
        return bool(self.fs.isfile(f"{self.base}/{relpath}"))

    def sizes(self, relpaths: Iterable[str]) -> dict[str, int | None]:
        """The size of each file (None where there is none), listing a folder once when many of its files are asked."""
        folders: dict[str, list[str]] = {}
        for relpath in relpaths:
            folders.setdefault(relpath.rpartition("/")[0], []).append(relpath)
        found: dict[str, int | None] = {}
        for folder, wanted in folders.items():
            if len(wanted) < LISTED:
                for relpath in wanted:
                    try:
                        found[relpath] = int(self.fs.info(f"{self.base}/{relpath}")["size"])
                    except FileNotFoundError:
                        found[relpath] = None
                continue
            try:
                listed = self.fs.ls(f"{self.base}/{folder}".rstrip("/"), detail=True)
            except FileNotFoundError:
                listed = []
            by_name = {str(entry["name"]).rstrip("/").rpartition("/")[2]: entry for entry in listed}
            for relpath in wanted:
                entry = by_name.get(relpath.rpartition("/")[2])
                found[relpath] = int(entry["size"]) if entry is not None and entry.get("type") == "file" else None
        return found

    def glob(self, pattern: str) -> list[str]:
        """The files matching ``pattern``, relative to the root, sorted."""
        prefix = self.base + "/"  # fsspec names what it finds without the protocol, as ``base`` is
        found = [str(name) for name in self.fs.glob(f"{self.base}/{pattern}")]
        return sorted(name[len(prefix):] if name.startswith(prefix) else name for name in found)

    def temporaries(self, folders: tuple[str, ...]) -> list[str]:
        """The temporaries an interrupted write left in ``folders``."""
        names: list[str] = []
        for folder in folders:
            names += self.fs.glob(f"{self.base}/{folder}/*/*{TMP_MARK}*")
        return names

    def remove(self, name: str) -> None:
        """Remove the temporary ``name`` (as ``temporaries`` named it)."""
        self.fs.rm_file(name)

    def delete(self, relpath: str) -> None:
        """Delete the file at ``relpath`` if there is one."""
        if self.fs.exists(f"{self.base}/{relpath}"):
            self.fs.rm_file(f"{self.base}/{relpath}")


def _create_exclusive(final: Path, data: bytes) -> bool:
    """``O_CREAT | O_EXCL`` where hard links are not supported: exclusive, though a reader may see it half written."""
    try:
        fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return True


def open_root(root: Root) -> DataRoot:
    """The data root ``root`` names (a URL or a directory)."""
    return FsspecRoot(str(root)) if is_url(root) else LocalRoot(Path(root))


def remove_stale_temporaries(root: Root, folders: tuple[str, ...] = ("episodes", "packs", "campaigns")) -> int:
    """Delete temporaries left by dead writers on this host; return how many were removed."""
    data = open_root(root)
    host = socket.gethostname()
    removed = 0
    for name in data.temporaries(folders):
        owner = name.rsplit(TMP_MARK, 1)[1]
        owner_host, _, pid = owner.rpartition("-")
        if owner_host == host and pid.isdigit() and not _alive(int(pid)):
            data.remove(name)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ["DataRoot", "FsspecRoot", "LocalRoot", "Root", "as_root", "install_hint", "is_url", "local_path",
           "open_root", "remove_stale_temporaries", "tmp_suffix"]
