"""Tests that run once per kernel path (instruction-set level).

A kernel path is a cap on the instruction set every kernel uses
(runtime/kernels/cpu/CpuFeatures.h): scalar, avx2, avx512, avx512bf16, amx.
`isa_cc_test(name = "x_test", ...)` makes x_test_scalar ... x_test_amx, each
with SPANC_ISA set, and a test_suite x_test of them all. A level the host
lacks passes without running and says so in its log ("spanc-isa: skipped"),
which tools/test.sh collects into the list CI prints.

A `heavy` test (a model on every path: minutes each) also gets the tag
isa_heavy_LEVEL, so that tools/test.sh can run only the host's own path of
it under ASan, where each run takes several times as long.
"""

ISA_LEVELS = ["scalar", "avx2", "avx512", "avx512bf16", "amx"]

def _level_tags(level, heavy):
    return ["isa_" + level] + (["isa_heavy_" + level] if heavy else [])

def isa_cc_test(name, srcs, deps = [], copts = [], linkopts = [], tags = [], heavy = False, **kwargs):
    """A cc_test per kernel path, with //test/isa:isa_gtest_main.

    The sources compile once, into a library every path's test links.

    Args:
      name: the test_suite's name; each path's test is NAME_LEVEL.
      srcs: the test's sources.
      deps: the test's deps (without a gtest main).
      copts: compile options of the sources.
      linkopts: link options.
      tags: tags of every path's test.
      heavy: whether ASan runs only the host's path of it.
      **kwargs: passed to each cc_test (size, data, shard_count, ...).
    """
    native.cc_library(
        name = name + "_library",
        testonly = True,
        srcs = srcs,
        deps = deps + ["//test/isa:isa_gtest_main"],
        copts = copts,
        linkopts = linkopts,
        alwayslink = True,
    )
    tests = []
    for level in ISA_LEVELS:
        native.cc_test(
            name = name + "_" + level,
            deps = [":" + name + "_library"],
            linkopts = linkopts,
            env = {"SPANC_ISA": level},
            tags = tags + _level_tags(level, heavy),
            **kwargs
        )
        tests.append(":" + name + "_" + level)
    native.test_suite(name = name, tests = tests, tags = tags)

def isa_sh_test(name, args = [], tags = [], heavy = False, **kwargs):
    """An sh_test per kernel path; the script gets SPANC_ISA and runs every
    spanc it starts under it (test/isa/isa_skip.sh says whether to skip).

    Args:
      name: the test_suite's name; each path's test is NAME_LEVEL.
      args: the script's arguments.
      tags: tags of every path's test.
      heavy: whether ASan runs only the host's path of it.
      **kwargs: passed to each sh_test (srcs, size, data, ...).
    """
    tests = []
    for level in ISA_LEVELS:
        native.sh_test(
            name = name + "_" + level,
            args = args,
            env = {"SPANC_ISA": level},
            tags = tags + _level_tags(level, heavy),
            **kwargs
        )
        tests.append(":" + name + "_" + level)
    native.test_suite(name = name, tests = tests, tags = tags)
