"""cuda_library: compiles .cu files with the toolkit's nvcc into a cc_library.

Bazel 4 has no CUDA rules; nvcc runs in a genrule per source file and the
objects (position-independent) become the srcs of an ordinary cc_library, so
C++ targets depend on CUDA code like on any other library. Nothing here needs
a GPU: kernels compile for the architectures below and run where one exists.
"""

# sm_80 (A100), sm_90 (H100/H200), and PTX for newer devices to JIT.
CUDA_ARCH_FLAGS = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

NVCC = "/usr/local/cuda/bin/nvcc"

def cuda_library(name, srcs, hdrs = [], shared_hdrs = [], deps = [], copts = [], **kwargs):
    """A cc_library whose srcs are .cu files compiled by nvcc.

    Args:
      name: target name.
      srcs: .cu files.
      hdrs: headers the .cu files and their users include.
      shared_hdrs: headers of other packages the .cu files include (their
        cc_library must be in deps too): nvcc's action sees only the files
        it lists.
      deps: cc_library deps (their headers are visible to nvcc).
      copts: extra nvcc flags.
      **kwargs: passed to cc_library (visibility, tags, ...).
    """
    objs = []
    for src in srcs:
        obj = "_objs_cuda/%s/%s.o" % (name, src.rsplit(".", 1)[0])
        native.genrule(
            name = "%s_%s_nvcc" % (name, src.replace("/", "_").replace(".", "_")),
            srcs = [src] + hdrs + shared_hdrs,
            outs = [obj],
            cmd = " ".join([
                NVCC,
                "-std=c++17",
                "-O3",
                "--expt-relaxed-constexpr",
                "-Werror=all-warnings",
                "-Xcompiler=-fPIC,-Wall,-Wextra,-Werror",
                "-I.",
                "-I$(GENDIR)",
            ] + CUDA_ARCH_FLAGS + copts + [
                "-c $(location %s)" % src,
                "-o $@",
            ]),
            message = "nvcc %s" % src,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        alwayslink = True,
        **kwargs
    )
