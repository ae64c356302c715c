#!/usr/bin/env bash
# The device calls for benchmarks/device/libero_gpu.py, in order (docs/PERFORMANCE.md, "LIBERO on a GPU host"):
#   bash benchmarks/device/libero_gpu.sh unpack part1    carry: .device/part1   (wheels, PyAV; ~45 MiB)
#   bash benchmarks/device/libero_gpu.sh unpack part2    carry: .device/part2   (LIBERO, robosuite, assets; ~40 MiB)
#   bash benchmarks/device/libero_gpu.sh run [ARGS]      carry: .device/part3   (optional: OSMesa; then the benchmark)
# .device/ is written here by `python benchmarks/device/stage.py [--osmesa]`; the parts stay unpacked in
# /tmp/assay-device between calls while the machine is held (it goes back ~30 s after a call returns).
set -euo pipefail
STAGE=/tmp/assay-device
mkdir -p "$STAGE/site"
case "${1:-}" in
  unpack)
    part=".device/${2:?which part}"
    test -d "$part" || { echo "$part is not here: run benchmarks/device/stage.py and carry it"; exit 2; }
    if [ "$2" = part1 ]; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$STAGE/site" "$part"/*.whl
    else
      tar -xJf "$part/site.tar.xz" -C "$STAGE"
    fi
    du -sh "$STAGE/site"
    ;;
  run)
    shift
    if [ -d .device/part3 ]; then  # Debian's OSMesa and LLVM, unpacked beside (never over) the system's libraries
      for deb in .device/part3/*.deb; do dpkg -x "$deb" "$STAGE/osmesa"; done
      export LD_LIBRARY_PATH="$STAGE/osmesa/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    test -d "$STAGE/site/mujoco" && test -d "$STAGE/site/robosuite" || { echo "unpack part1 and part2 first"; exit 2; }
    export PYTHONPATH="$STAGE/site:$PWD/src:$PWD" PYTHONUNBUFFERED=1
    nvidia-smi -L || true
    python3 benchmarks/device/libero_gpu.py "$@" 2>&1 | tee "${OUT:-/tmp}/libero_gpu.log"
    ;;
  *)
    echo "usage: $0 unpack part1|part2 | run [libero_gpu.py options]"; exit 2 ;;
esac
