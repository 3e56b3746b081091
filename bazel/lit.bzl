"""lit_tests: one Bazel test per directory of lit + FileCheck tests.

Each directory under test/lit/ is the specification of one pass or feature;
a test per directory keeps Bazel's caching fine-grained.
"""

def lit_tests(dirs, data = [], tags = []):
    """Defines an sh_test DIR_test for each directory in `dirs`.

    Args:
      dirs: directories (relative to this package) holding lit test files.
      data: extra runfiles (tools the tests invoke).
      tags: tags for every test.
    """
    for d in dirs:
        native.sh_test(
            name = d + "_test",
            srcs = ["//bazel:run_lit.sh"],
            args = ["$(rootpath //tools/spanc)", native.package_name() + "/" + d],
            data = native.glob([d + "/**"]) + data + [
                "lit.cfg.py",
                "//tools/spanc",
            ],
            size = "small",
            tags = tags,
        )
