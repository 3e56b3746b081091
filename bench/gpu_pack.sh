#!/usr/bin/env bash
# bench/gpu_pack.sh — run HERE (a development machine with Bazel and the
# CUDA toolkit, no GPU needed): builds what bench/gpu.sh runs on the GPU
# machine and packs it into .gpu/spanc-gpu.tar.xz (.gpu/ is ignored by git),
# the one path the device tool's `carry` names.
#
# The GPU machine has no Bazel and none of the Debian libraries the build
# links, so the pack holds the binaries (spanc, the GPU test binaries, the
# synthetic model generator) and every shared library they load that is not
# the C library or CUDA's: the project's own test libraries (Bazel's
# _solib_k8), oneDNN, ANTLR, Boost, SQLite, OpenSSL, libstdc++, libgomp...
# CUDA's runtime and cuBLAS/cuBLASLt (600 MB) are NOT carried: gpu.sh finds
# the machine's (/usr/local/cuda/lib64 or PyTorch's nvidia-* wheels), and
# libcuda comes with its driver. LLVM is linked statically. xz keeps the
# pack under the tool's 64 MiB limit for the whole working tree.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# GPU_PACK_OUTPUT_BASE: build in another output base (while the test
# suite holds the default one).
bazel=(bazel ${GPU_PACK_OUTPUT_BASE:+--output_base="$GPU_PACK_OUTPUT_BASE"})
tests=$("${bazel[@]}" query 'attr(name, ".*cuda.*", kind(cc_test, //test/...))' 2>/dev/null)
targets=(//tools/spanc //test/data/synthetic:make_tiny_model_gguf $tests)
# (--symlink_prefix=/: the other base leaves bazel-bin and bazel-testlogs
# pointing at the default one.)
"${bazel[@]}" build ${GPU_PACK_OUTPUT_BASE:+--symlink_prefix=/} "${targets[@]}"
bin="$("${bazel[@]}" info bazel-bin 2>/dev/null)"

stage="$root/.gpu/stage"
rm -rf "$root/.gpu"
mkdir -p "$stage/bin" "$stage/lib"
binaries=("$bin/tools/spanc/spanc"
          "$bin/test/data/synthetic/make_tiny_model_gguf")
for test in $tests; do
  package="${test#//}"
  package="${package%%:*}"
  binaries+=("$bin/$package/${test##*:}")
done
cp "${binaries[@]}" "$stage/bin/"
chmod u+w "$stage/bin/"*

# The libraries the binaries load, minus glibc's and CUDA's (the machine's
# own must serve: the driver matches its CUDA).
for binary in "${binaries[@]}"; do
  ldd "$binary" | awk '/=> \// {print $3}'
done | sort -u | while read -r library; do
  case "$(basename "$library")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
    libcuda.so*|libcudart.so*|libcublas*|libcudnn*|libnvidia*) ;;
    *) cp -L "$library" "$stage/lib/" ;;
  esac
done
chmod -R u+w "$stage"
git rev-parse HEAD > "$stage/COMMIT"
ldd "$stage/bin/spanc" > "$stage/LDD-HERE"

tar -C "$stage" -cJf "$root/.gpu/spanc-gpu.tar.xz" .
unpacked=$(du -sm "$stage" | cut -f1)
rm -rf "$stage"
packed=$(du -m "$root/.gpu/spanc-gpu.tar.xz" | cut -f1)
tree=$(git ls-files -z | xargs -0 du -cm 2>/dev/null | tail -1 | cut -f1)
echo "gpu_pack: .gpu/spanc-gpu.tar.xz ${packed} MiB (${unpacked} MiB" \
     "unpacked), tracked tree ~${tree} MiB; the tool carries 64 MiB in all"
if (( packed + tree > 60 )); then
  echo "gpu_pack: too big to carry" >&2
  exit 1
fi

# SmolLM2 (98 MB) does not fit one call's 64 MiB: it travels in three
# parts, one short call each (`ls .gpu-model-N`, carrying .gpu-model-N),
# then the run carries .gpu; gpu.sh joins the parts and checks the sha256.
# The machine keeps what a call carried only while it is warm (30 s), so
# the four calls must follow each other at once.
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
[[ -f $model ]] || model="$HOME/.cache/spanc/models/SmolLM2-135M-Instruct.Q4_1.gguf"
rm -rf "$root"/.gpu-model-*
if [[ -f $model ]]; then
  size=$(stat -L -c %s "$model")
  part=$(( (size + 2) / 3 ))
  for index in 1 2 3; do
    mkdir -p "$root/.gpu-model-$index"
    dd if="$model" of="$root/.gpu-model-$index/part" bs=1M iflag=skip_bytes,count_bytes \
      skip=$(( (index - 1) * part )) count=$part status=none
  done
  sha256sum "$model" | cut -d' ' -f1 > "$root/.gpu-model-3/SHA256"
  echo "gpu_pack: SmolLM2 in .gpu-model-{1,2,3} ($(( part >> 20 )) MiB each):" \
       "carry each in its own short call, one right after the other, then" \
       ".gpu with the run (bench/README.md, \"GPU\")"
fi
