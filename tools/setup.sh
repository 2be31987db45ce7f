#!/usr/bin/env bash
# Set-up, build and run for a fresh Debian machine. The README's two commands:
#   bash tools/setup.sh main   # install what is missing, build, run the main job
#   bash tools/setup.sh test   # install what is missing, build, run every test
# Other verbs: deps (install only), build (deps + build).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${FSDPGEN_BUILD_DIR:-$root/build}"
jobs="${FSDPGEN_JOBS:-2}"

# Debian packages the project needs; one line per purpose.
packages=(
  cmake ninja-build g++ ccache pkg-config                 # build
  libfmt-dev libcli11-dev nlohmann-json3-dev               # libraries
  libgtest-dev                                             # tests
  clang libclang-rt-14-dev                                 # parser fuzzing (libFuzzer, sanitizers)
)

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

build() {
  deps
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j "$jobs"
}

main_job() {
  build
  echo "setup: main job: fsdpgen check specs/tiny.fsdp --dump"
  "$build/fsdpgen" check "$root/specs/tiny.fsdp" --dump
  echo "setup: fsdpgen plan specs/tiny.fsdp --gpu cpu"
  "$build/fsdpgen" plan "$root/specs/tiny.fsdp" --gpu cpu
}

test_all() {
  build
  cd "$build"
  ctest -j "$jobs" --output-on-failure
}

case "${1:-}" in
  deps) deps ;;
  build) build ;;
  main) main_job ;;
  test) test_all ;;
  *) echo "usage: bash tools/setup.sh main|test|build|deps" >&2; exit 2 ;;
esac
