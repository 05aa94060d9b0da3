#!/bin/bash
# Builds Horovod 0.28.1 (PyTorch + Gloo + MPI, no TensorFlow/MXNet) from its sdist and installs it
# into a venv. Usage: tests/horovod/build-horovod.sh [VENV]   (default: .venv of this repository)
#
# Horovod 0.28.1 (its last release) does not build against torch >= 2.1 as released: it compiles
# as C++14 and torch's headers need C++17. This script changes the two `set(CMAKE_CXX_STANDARD 14)`
# lines (CMakeLists.txt, horovod/torch/CMakeLists.txt) to 17 and nothing else.
#
# - Idempotent: does nothing when `import horovod.torch` works in VENV and `horovodrun --check-build`
#   lists PyTorch (and MPI, which the srun starter needs).
# - The built wheel is cached in $HPCLAUNCH_WHEEL_CACHE (default ~/.cache/hpclaunch/wheels), in a
#   folder named after what the binary depends on (Python tag, torch version, MPI library), so a
#   second run (another venv, a CI machine with the cache restored) installs in seconds.
# - Needs: cmake, g++, Open MPI with headers (Debian: openmpi-bin libopenmpi-dev), torch already in
#   VENV, and numpy (horovod uses it at run time without declaring it; installed here if missing).
# - A build costs about 5 minutes on 2 cores (MAKEFLAGS=-j2; override with MAKEFLAGS=-jN).
set -euo pipefail

HVD_VERSION=0.28.1
# sha256 of horovod-0.28.1.tar.gz on PyPI (checked before anything is built from it).
HVD_SDIST_SHA256=92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=${1:-$repo/.venv}
venv=$(cd "$venv" 2>/dev/null && pwd) || { echo "build-horovod: no venv at ${1:-$repo/.venv} (run make venv)" >&2; exit 2; }
py=$venv/bin/python
[ -x "$py" ] || { echo "build-horovod: $py not found" >&2; exit 2; }
cache_root=${HPCLAUNCH_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpclaunch/wheels}

log() { printf 'build-horovod: %s\n' "$*" >&2; }

# True when horovod.torch imports and `horovodrun --check-build` lists PyTorch and MPI as built (the
# srun starter needs MPI). Keeps that output in $check_build (the check imports torch several times:
# 10-40 s on a busy 2-core machine, so it runs once).
check_build=''
horovod_ok() {
  "$py" -c 'import horovod.torch' >/dev/null 2>&1 || return 1
  [ -x "$venv/bin/horovodrun" ] || return 1
  check_build=$("$venv/bin/horovodrun" --check-build 2>/dev/null) || return 1
  grep -q '\[X\] PyTorch' <<<"$check_build" && grep -q '\[X\] MPI' <<<"$check_build"
}

if horovod_ok; then
  log "horovod already works in $venv; nothing to do"
  printf '%s\n' "$check_build"
  exit 0
fi

# --- prerequisites ---
"$py" -c 'import torch' 2>/dev/null ||
  { log "torch is not installed in $venv (install it first: make venv)"; exit 2; }
if ! "$py" -c 'import numpy' 2>/dev/null; then
  log "installing numpy (horovod needs it at run time)"
  "$py" -m pip install -q numpy
fi
for tool in cmake g++ mpicxx mpirun; do
  command -v "$tool" >/dev/null ||
    { log "$tool not found: install cmake, g++ and Open MPI (apt-get install cmake g++ openmpi-bin libopenmpi-dev)"; exit 2; }
done

# The wheel contains a C++ extension built against this torch's ABI and this MPI library: key the
# cache on both so a torch or MPI upgrade rebuilds instead of installing a wheel that cannot load.
torch_version=$("$py" -c 'import torch; print(torch.__version__)')
py_tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
mpi_version=$(mpirun --version 2>/dev/null | head -n1 | tr -c 'A-Za-z0-9.\n' '_' | tr -s '_')
key="horovod-$HVD_VERSION-$py_tag-torch$torch_version-$mpi_version"
key=${key//[^A-Za-z0-9._-]/_}
cache_dir=$cache_root/$key
mkdir -p "$cache_root"

# One build at a time per cache (CI and `make horovod` may race).
exec 9>"$cache_root/.build-horovod.lock"
flock 9

install_cached() {
  local whl
  whl=$(ls "$cache_dir"/horovod-"$HVD_VERSION"-*.whl 2>/dev/null | head -n1) || true
  [ -n "$whl" ] || return 1
  log "installing cached wheel $whl"
  "$py" -m pip install -q --force-reinstall --no-deps "$whl" &&
    "$py" -m pip install -q "$whl" &&   # runtime dependencies (cloudpickle, psutil, pyyaml, cffi, ...)
    horovod_ok
}

if install_cached; then
  log "done (from cache)"
  printf '%s\n' "$check_build"
  exit 0
fi
if [ -d "$cache_dir" ]; then
  log "cached wheel in $cache_dir is missing or does not work here; rebuilding"
  rm -rf -- "$cache_dir"
fi

# --- build ---
work=$(mktemp -d "${TMPDIR:-/tmp}/build-horovod.XXXXXX")
trap 'rm -rf -- "$work"' EXIT

log "downloading the horovod==$HVD_VERSION sdist"
"$py" -m pip download -q --no-deps --no-binary :all: -d "$work/sdist" "horovod==$HVD_VERSION"
sdist=$work/sdist/horovod-$HVD_VERSION.tar.gz
echo "$HVD_SDIST_SHA256  $sdist" | sha256sum -c --quiet - ||
  { log "sha256 of $sdist does not match the pinned one"; exit 1; }
tar -xzf "$sdist" -C "$work"
src=$work/horovod-$HVD_VERSION

# The C++17 change: exactly these two lines, each must be found once.
for f in CMakeLists.txt horovod/torch/CMakeLists.txt; do
  n=$(grep -c '^ *set(CMAKE_CXX_STANDARD 14)' "$src/$f" || true)
  [ "$n" = 1 ] || { log "expected one 'set(CMAKE_CXX_STANDARD 14)' in $f, found $n"; exit 1; }
  sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$src/$f"
done

log "building horovod $HVD_VERSION against torch $torch_version (about 5 min on 2 cores)"
start=$(date +%s)
MAKEFLAGS=${MAKEFLAGS:--j2} \
HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
  "$py" -m pip wheel --no-deps --no-build-isolation --no-cache-dir -w "$work/wheel" "$src" \
  >"$work/build.log" 2>&1 ||
  { log "build failed; last lines of the log:"; tail -n 40 "$work/build.log" >&2; exit 1; }
log "built in $(( $(date +%s) - start )) s"

whl=$(ls "$work"/wheel/horovod-"$HVD_VERSION"-*.whl)
mkdir -p "$cache_dir.tmp.$$"
cp -- "$whl" "$cache_dir.tmp.$$/"
mv -T -- "$cache_dir.tmp.$$" "$cache_dir"

install_cached || { log "the freshly built wheel does not work in $venv"; printf '%s\n' "$check_build" >&2; exit 1; }
log "done; wheel cached in $cache_dir"
printf '%s\n' "$check_build"
