#!/usr/bin/env bash
# Set-up, build and run for a fresh Debian machine. The README's two commands:
#   bash tools/setup.sh main   # install what is missing, build, run the main job
#   bash tools/setup.sh test   # install what is missing, build, run every test
# Other verbs: deps (install only), build (deps + build), cmake4 (the CMake 4
# configure check `test` runs, on an existing build), python (the venv of
# `fsdpgen prepare` and `fsdpgen metrics`), wandb (W&B into that venv).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${FSDPGEN_BUILD_DIR:-$root/build}"
jobs="${FSDPGEN_JOBS:-2}"

# Debian packages the project needs; one line per purpose.
packages=(
  cmake ninja-build g++ ccache pkg-config                 # build
  libfmt-dev libcli11-dev nlohmann-json3-dev zlib1g-dev    # libraries
  libopenmpi-dev openmpi-bin libopenblas-dev               # runtime: MPI, BLAS
  libgtest-dev                                             # tests
  slurm-wlm munge                                          # tests: a local Slurm cluster
  clang libclang-rt-14-dev                                 # fuzzing (libFuzzer, sanitizers): tests/fuzz
  clang-19 libclang-19-dev libclang-cpp19-dev llvm-19-dev  # custom layers: fsdpgen-layers (LibTooling)
  python3-pip                                              # tests: CMake 4 from PyPI (cmake4_check)
  python3-matplotlib                                       # tools/plot_metrics.py (any python: it runs itself with this one) and its test
  python3-venv                                             # fsdpgen prepare: a venv with tokenizers (python_env)
)
# An ssh server for mpirun across the test cluster's hosts (tests/slurm/
# multihost.sh mpirun): on CI only, as elsewhere installing it may start one.
[ "${CI:-}" = true ] && packages+=(openssh-server)

deps() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "setup: installing ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# fetch_wheel DEST PREFIX PIP_ARGS...: one wheel from PyPI (binary, no
# dependencies), its members whose names start with PREFIX ("" for all)
# extracted into DEST; fails when pip or the wheel does.
fetch_wheel() {
  local dest=$1 prefix=$2 tmp status=0
  shift 2
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "$@" &&
    mkdir -p "$dest" && python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith(sys.argv[3])])' \
    "$tmp"/*.whl "$dest" "$prefix" || status=1
  rm -rf "$tmp"
  return $status
}

# cuDNN's C++ frontend (header-only; cuDNN itself comes with the CUDA
# install): its headers from PyPI's nvidia-cudnn-frontend wheel, into the
# build directory where CMakeLists.txt looks for them. Only with a CUDA
# compiler; without them (no network) attention runs on the hand-written
# kernels, as CMake says.
cudnn_frontend() {
  local dir="$build/cudnn-frontend"
  [ -f "$dir/include/cudnn_frontend.h" ] && return 0
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || return 0
  if fetch_wheel "$dir" include/ --python-version 3.12 --platform manylinux_2_28_x86_64 \
    nvidia-cudnn-frontend; then
    echo "setup: cuDNN frontend headers in $dir/include"
  else
    echo "setup: note: cannot download the cuDNN frontend (nvidia-cudnn-frontend from PyPI);" \
      "attention will run on the hand-written kernels" >&2
  fi
}

# The python of the tools fsdpgen runs (tools/prepare.py, tools/metrics_export.py):
# a venv in the build directory, made from Debian's python3, with the
# tokenizer library and pyarrow (tools/requirements-prepare.txt) and
# tensorboardX and tensorboard (tools/requirements-metrics.txt), pinned;
# fsdpgen runs $build/python/bin/python (or $FSDPGEN_PYTHON). Made again when
# the pins change. Without PyPI it says so and the tests that need it skip.
python_env() {
  local venv="$build/python" pins=("$root/tools/requirements-prepare.txt" "$root/tools/requirements-metrics.txt")
  cat "${pins[@]}" | cmp -s - "$venv/requirements.txt" 2>/dev/null && return 0
  rm -rf "$venv"
  if /usr/bin/python3 -m venv "$venv" &&
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]/#/-r}"; then
    cat "${pins[@]}" >"$venv/requirements.txt"
    echo "setup: the tools' python in $venv ($("$venv/bin/python" -c 'import tokenizers, pyarrow, tensorboardX
print("tokenizers", tokenizers.__version__, "pyarrow", pyarrow.__version__, "tensorboardX", tensorboardX.__version__)'))"
  else
    rm -rf "$venv"
    echo "setup: note: cannot install tokenizers, pyarrow and tensorboardX from PyPI into $venv;" \
      "fsdpgen prepare, fsdpgen metrics and their tests need them (bash tools/setup.sh python)" >&2
  fi
}

# Weights & Biases (tools/requirements-wandb.txt) into that venv, for
# `fsdpgen metrics --wandb-offline`: optional, as it is large. Made again with
# the venv.
wandb_env() {
  local venv="$build/python" pins="$root/tools/requirements-wandb.txt"
  [ -x "$venv/bin/python" ] || return 1
  cmp -s "$pins" "$venv/requirements-wandb.txt" 2>/dev/null && return 0
  if "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$pins"; then
    cp "$pins" "$venv/requirements-wandb.txt"
    echo "setup: wandb $("$venv/bin/python" -c 'import wandb; print(wandb.__version__)') in $venv"
  else
    echo "setup: note: cannot install wandb from PyPI into $venv;" \
      "fsdpgen metrics --wandb-offline and its tests need it (bash tools/setup.sh wandb)" >&2
    return 1
  fi
}

# build [TARGET...]: configure, then build the targets (default: everything,
# tests included).
build() {
  deps
  cudnn_frontend
  # FSDPGEN_NATIVE=1: CPU code for this machine alone (CMakeLists.txt says what is portable).
  local native=OFF
  [ "${FSDPGEN_NATIVE:-0}" = 1 ] && native=ON
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFSDPGEN_NATIVE=$native >/dev/null
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$build" -j "$jobs" "${targets[@]}"
}

# Open MPI refuses to start as root unless told; CI runs as root.
allow_mpi_as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
}

# The main job: plan the tiny spec, generate its training binary, and train
# it on this CPU across 2 processes.
main_job() {
  local start=$SECONDS
  build fsdpgen  # the compiler and the runtime libraries it links; not the tests
  echo "setup: fsdpgen built in $((SECONDS - start)) s"
  allow_mpi_as_root
  echo "setup: fsdpgen plan specs/tiny.fsdp --gpu cpu"
  "$build/fsdpgen" plan "$root/specs/tiny.fsdp" --gpu cpu
  echo "setup: fsdpgen specs/tiny.fsdp --target cpu -o build/train"
  (cd "$root" && "$build/fsdpgen" specs/tiny.fsdp --target cpu -o "$build/train")
  echo "setup: mpirun -n 2 build/train"
  mpirun -n 2 --bind-to none "$build/train"
  cat <<EOT
setup: done in $((SECONDS - start)) s. The training binary is $build/train; try
  mpirun -n 2 $build/train --steps 50 --data README.md --save model.safetensors --trace step.json
  $build/fsdpgen plan specs/gpt2-124m.fsdp --gpu h100-sxm     # memory and step time of GPT-2 on a GPU
  bash tools/setup.sh test                                     # build and run every test
and docs/walkthrough.md for a real run: your text, a tokenizer, samples, a model transformers loads.
EOT
}

# CMake 4.x (what `pip install cmake` gives users) finds CUDA differently
# from Debian's 3.25: a list of include directories, and NCCL inside the
# toolkit outside CUDAToolkit_LIBRARY_DIR. Configure once with it (no build)
# and check that it finds the CUDA backend wherever 3.25 did, with flags that
# hold no list separator (CMakeLists.txt stops on one).
cmake4_check() {
  local config="$build/generated/codegen/emit/BuildConfig.h"
  if ! grep -q "kBuildCudaAvailable = true" "$config"; then
    echo "setup: CMake 4 check skipped: this build has no CUDA backend (no nvcc or NCCL here)"
    return 0
  fi
  local dir="$build/cmake4"
  if [ ! -x "$dir/wheel/cmake/data/bin/cmake" ]; then
    rm -rf "$dir/wheel"
    fetch_wheel "$dir/wheel" "" "cmake>=4,<5" ||
      { echo "setup: error: cannot download CMake 4 from PyPI for the CMake 4 check" >&2; return 1; }
    chmod +x "$dir"/wheel/cmake/data/bin/*
  fi
  local cmake4="$dir/wheel/cmake/data/bin/cmake"
  echo "setup: configuring with $("$cmake4" --version | head -1) (configure only)"
  "$cmake4" -S "$root" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >"$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log" >&2; echo "setup: error: CMake 4 cannot configure" >&2; return 1; }
  if ! grep -q "kBuildCudaAvailable = true" "$dir/build/generated/codegen/emit/BuildConfig.h"; then
    grep "CUDA" "$dir/configure.log" >&2
    echo "setup: error: CMake 4 does not find the CUDA backend that $(cmake --version | head -1) finds" >&2
    return 1
  fi
  if grep -E '(Flags|Libraries) = "[^"]*;' "$dir/build/generated/codegen/emit/BuildConfig.h" >&2; then
    echo "setup: error: with CMake 4 a generated compile command holds a list separator" >&2
    return 1
  fi
  echo "setup: CMake 4 finds the CUDA backend: $(grep -o 'NCCL [^;]*' "$dir/configure.log" | head -1)"
}

test_all() {
  build
  python_env
  wandb_env || true  # its tests skip, saying why
  cmake4_check
  allow_mpi_as_root
  cd "$build"
  ctest -j "$jobs" --output-on-failure
}

case "${1:-}" in
  deps) deps ;;
  build) build ;;
  main) main_job ;;
  test) test_all ;;
  cmake4) cmake4_check ;;
  python) deps && python_env ;;
  wandb) deps && python_env && wandb_env ;;
  *) echo "usage: bash tools/setup.sh main|test|build|deps|cmake4|python|wandb" >&2; exit 2 ;;
esac
