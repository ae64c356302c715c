#!/usr/bin/env bash
# The GPU-day benchmark in ONE device call (docs/PERFORMANCE.md, "LIBERO on a GPU host"):
#   bash benchmarks/device/libero_gpu.sh run [libero_gpu.py options]    carry: .device/core     timeout_s: 540
# and, optional, at once after it while the machine is still warm (~30 s; it keeps .device/unpacked):
#   bash benchmarks/device/libero_gpu.sh osmesa                         carry: .device/osmesa   timeout_s: 240
# .device/ is written here by `python benchmarks/device/stage.py [--osmesa]`. `run` needs nothing from an earlier
# call: it unpacks the payload under the repo copy (.device/unpacked, ignored by git; reused when the same
# payload was unpacked there already), makes glvnd's EGL loader reachable, and runs libero_gpu.py under a time
# guard: the whole call, unpacking included, ends within ASSAY_DEVICE_BUDGET_S (default 470 s, under 8 minutes).
# Results: $OUT/libero_gpu.log (everything printed) and $OUT/libero_gpu.json (rewritten after each part).
# Elsewhere (a CPU check): PYTHON=/path/to/python3.12 bash benchmarks/device/libero_gpu.sh run --dry-run
set -uo pipefail
START=$SECONDS
BUDGET=${ASSAY_DEVICE_BUDGET_S:-470}
PY=${PYTHON:-python3}
RESULTS=${OUT:-/tmp/assay-device-out}
UNPACKED=.device/unpacked
PAYLOAD=.device/core/payload.tar.xz
mkdir -p "$RESULTS"

left() { echo $((BUDGET - (SECONDS - START))); }

unpack() {  # idempotent: the same payload (by checksum) already unpacked is reused
  test -f "$PAYLOAD" || { echo "$PAYLOAD is not here: run benchmarks/device/stage.py, then carry .device/core"; exit 2; }
  local want
  want=$(cksum < "$PAYLOAD")
  if [ -f "$UNPACKED/.payload" ] && [ "$(cat "$UNPACKED/.payload")" = "$want" ]; then
    echo "payload already unpacked in $UNPACKED"; return
  fi
  rm -rf "$UNPACKED" && mkdir -p "$UNPACKED"
  "$PY" -c 'import sys, tarfile
with tarfile.open(sys.argv[1]) as tar:
    tar.extractall(sys.argv[2], **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))' \
    "$PAYLOAD" "$UNPACKED" || { echo "could not unpack $PAYLOAD"; exit 2; }
  echo "$want" > "$UNPACKED/.payload"
  echo "unpacked $(du -sh "$UNPACKED" | cut -f1) in $((SECONDS - START)) s"
}

gl_setup() {  # glvnd's EGL loader where the host has none; NVIDIA's EGL vendor file where glvnd would not look
  if ! ldconfig -p | grep -q 'libEGL.so.1 '; then
    cp -an "$UNPACKED"/gl/usr/lib/x86_64-linux-gnu/. /usr/lib/x86_64-linux-gnu/ && ldconfig \
      && echo "glvnd's libEGL.so.1 and libOpenGL.so.0 installed from the payload"
  fi
  local vendor=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  if [ -z "${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ] && [ -f "$vendor" ] \
      && ! ls /usr/share/glvnd/egl_vendor.d/*nvidia* /etc/glvnd/egl_vendor.d/*nvidia* >/dev/null 2>&1; then
    export __EGL_VENDOR_LIBRARY_FILENAMES=$vendor
  fi
  for dir in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [ -d "$dir" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir"
  done
  export PYTHONPATH="$PWD/$UNPACKED/site:$PWD/src:$PWD" PYTHONUNBUFFERED=1
  nvidia-smi -L 2>/dev/null || echo "nvidia-smi: no NVIDIA GPU here"
  ldconfig -p | grep -E 'lib(EGL|OpenGL|EGL_nvidia|OSMesa)\.so' | sed 's/^/  /'
}

case "${1:-}" in
  run)
    shift
    unpack
    gl_setup
    limit=$(left)
    # the script keeps to its budget; timeout is the backstop (then the JSON holds what was measured so far)
    timeout -k 10 "$limit" "$PY" benchmarks/device/libero_gpu.py --budget-s $((limit - 20)) \
      --reference "$UNPACKED/reference/pixels.npz" --json "$RESULTS/libero_gpu.json" "$@" 2>&1 \
      | tee "$RESULTS/libero_gpu.log"
    status=${PIPESTATUS[0]}
    echo "call: $((SECONDS - START)) s (budget $BUDGET s), exit $status"
    exit "$status"
    ;;
  osmesa)
    shift
    if [ ! -f "$UNPACKED/.payload" ]; then
      echo "$UNPACKED is not here: the machine was given back after the run call (a call keeps it warm ~30 s)."
      echo "This step is optional (OSMesa's frames/s on the device's CPUs); to take it, make both calls again back to back."
      exit 3
    fi
    test -d .device/osmesa || { echo ".device/osmesa is not here: stage.py --osmesa, then carry .device/osmesa"; exit 2; }
    # unpacked beside (never over) the system's libraries; only the OSMesa children see them (libero_gpu.py)
    for deb in .device/osmesa/*.deb; do dpkg-deb -x "$deb" .device/osmesa-root || exit 2; done
    gl_setup
    limit=$(left)
    timeout -k 10 "$limit" "$PY" benchmarks/device/libero_gpu.py --osmesa-only --budget-s $((limit - 20)) \
      --osmesa-lib "$PWD/.device/osmesa-root/usr/lib/x86_64-linux-gnu" \
      --json "$RESULTS/libero_gpu_osmesa.json" "$@" 2>&1 | tee "$RESULTS/libero_gpu_osmesa.log"
    exit "${PIPESTATUS[0]}"
    ;;
  *)
    echo "usage: $0 run [libero_gpu.py options] | osmesa"; exit 2 ;;
esac
