# lit configuration for spanc's lit + FileCheck tests (run through Bazel:
# bazel/run_lit.sh sets SPANC_BIN to the spanc binary in the runfiles).
import os

import lit.formats

config.name = "spanc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".span", ".ir", ".json", ".test"]
config.excludes = ["Inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
# Bazel's sandbox makes the source tree read-only; lit writes Output/ here.
config.test_exec_root = os.environ.get("TEST_TMPDIR", "/tmp/spanc-lit")

spanc = os.environ.get("SPANC_BIN")
if not spanc:
    lit_config.fatal("SPANC_BIN is not set; run lit tests with bazel test //test/lit/...")
config.substitutions.append(("%spanc", spanc))
config.substitutions.append((r"\bspanc\b", spanc))
config.environment["PATH"] = os.pathsep.join(
    ["/usr/lib/llvm-14/bin", config.environment.get("PATH", "/usr/bin:/bin")])
for name in ["SPANC_ROOT", "HOME"]:
    if name in os.environ:
        config.environment[name] = os.environ[name]
# Corpus indexes go to the index folder (~/.cache/spanc/index by default):
# keep the tests' own.
config.environment["SPANC_INDEX_DIR"] = os.path.join(config.test_exec_root,
                                                     "spanc-index")
