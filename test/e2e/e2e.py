"""End-to-end tests of `spanc run` on the examples and SmolLM2-135M.

Usage: e2e.py SPANC GROUP, with the working directory at the workspace root
(the runfiles root under Bazel), so `examples/...` resolves. GROUP is
`examples` (every example runs, exits 0, answers are non-empty) or
`invariance` (cache and relocation modes, cold vs warm, bulk vs one by one
give the same answers under --batch-invariant), `bulk`, `progress` or
`signals` (SIGINT/SIGTERM stop run, generate and index cleanly), or
`readme` (the README's first command, exactly as written, answers with the
corpus's fact in one sentence, cold and warm, in the default span mode and
under --cache=off). Every spanc runs under SPANC_ISA when it is set
(bazel/isa.bzl runs `readme` once per kernel path); a path this CPU lacks
is skipped with a "spanc-isa: skipped" line. Exits 0 with a SKIPPED message
when the model is absent and tools/setup.sh never ran here (no .venv in
SPANC_ROOT); once it ran, a missing model is a broken set-up and fails (the
index part of `signals` needs no model).
"""

import glob
import hashlib
import json
import os
import pty
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

EXAMPLES = [
    "examples/rag.span",
    "examples/judge.span",
    "examples/judge.json",
    "examples/map_reduce.span",
    "examples/bulk_rag.span",
    "examples/needle.span",
]

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL: " + message, flush=True)


CORPUS = "examples/corpus"


def real_corpus():
    """The folder the corpus's files really are in (through links)."""
    first = sorted(os.listdir(CORPUS))[0]
    return os.path.dirname(os.path.realpath(os.path.join(CORPUS, first)))


def run(spanc, model, path, *options):
    """Runs `spanc run PATH --json` and returns its parsed document (PATH
    may also be "--bulk DIR")."""
    command = [spanc, "run"] + path.split(" ", 1)
    command += ["--json", "--model", model, "-t", "1"]
    # Programs split into a temporary folder keep reading the examples'
    # corpus, which is outside their folder; in Bazel's runfiles its files
    # are links into the source tree, which must be allowed too.
    command += ["--allow-read", CORPUS, "--allow-read", real_corpus()]
    command += list(options)
    print("$ " + " ".join(command), flush=True)
    environment = dict(os.environ, OMP_WAIT_POLICY="passive")
    process = subprocess.run(command, capture_output=True, text=True,
                             env=environment)
    if process.returncode != 0:
        raise SystemExit("spanc run %s failed (exit %d):\n%s" %
                         (path, process.returncode, process.stderr))
    return json.loads(process.stdout)


def answers(document, index=0):
    """{query name: [answer texts]} of run `index` of a --json document."""
    result = {}
    for query in document["runs"][index]["queries"]:
        texts = []
        for item in query["results"]:
            check("error" not in item,
                  "query @%s failed: %s" % (query["name"], item.get("error")))
            texts.append(item["text"])
        result[query["name"]] = texts
    return result


# The README's example: the fact its answer must state, and the corpus file
# that holds it (the test checks both, so a new example updates both).
README_FACT = "six o'clock"
README_FACT_FILE = "examples/handbook/kitchen.md"


def readme_command():
    """The spanc arguments of the README's first command (the part after
    `bazel run //tools/spanc --`)."""
    with open("README.md") as readme:
        text = readme.read()
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    check(block is not None, "README.md: no ```sh block")
    first = block.group(1).splitlines()[0]
    marker = "bazel run //tools/spanc -- "
    check(marker in first, "README.md: the first command does not run spanc "
          "through `%s`: %r" % (marker.strip(), first))
    return shlex.split(first.split(marker, 1)[1])


def check_readme(spanc, model):
    """The README's first command, run as written from the workspace (where
    it runs for a user), under this test's kernel path."""
    del model  # the command names its own (the default, set up in models/)
    args = readme_command()
    with open(README_FACT_FILE) as document:
        check(README_FACT in document.read(),
              "%s no longer holds the fact %r" % (README_FACT_FILE, README_FACT))
    root = os.environ["SPANC_ROOT"]
    environment = dict(os.environ, OMP_WAIT_POLICY="passive")
    print("$ SPANC_ISA=%s spanc %s" % (os.environ.get("SPANC_ISA", ""),
                                       " ".join(args)), flush=True)
    process = subprocess.run([spanc] + args, cwd=root, capture_output=True,
                             text=True, env=environment)
    check(process.returncode == 0, "README command failed (exit %d): %s" %
          (process.returncode, process.stderr))
    answer = process.stdout.strip()
    print("answer: %r" % answer, flush=True)
    check(README_FACT in answer, "answer %r lacks the corpus's fact %r" %
          (answer, README_FACT))
    sentences = [part for part in re.split(r"(?<=[.!?])\s+", answer) if part]
    check(len(sentences) == 1, "answer %r is not one sentence" % answer)
    check(answer.endswith("."), "answer %r does not end its sentence" % answer)
    # Cold, warm, and without a cache: the same answer, ended by the stop,
    # not by max_tokens.
    program = next(arg for arg in args if arg.endswith(".span"))
    with open(program) as source:
        max_tokens = int(re.search(r"max_tokens\s*=\s*(\d+)",
                                   source.read()).group(1))
    for cache in ["span", "off"]:
        command = [spanc, "run", program, "--json", "--repeat", "2",
                   "--cache", cache]
        process = subprocess.run(command, cwd=root, capture_output=True,
                                 text=True, env=environment)
        check(process.returncode == 0, "%s failed: %s" %
              (" ".join(command), process.stderr))
        if process.returncode != 0:
            continue
        document = json.loads(process.stdout)
        for index in (0, 1):
            texts = answers(document, index)["rag"]
            check(texts == [answer], "--cache=%s run %d: %r, expected the "
                  "README command's %r" % (cache, index + 1, texts, answer))
            for call in document["runs"][index]["calls"]:
                check(call["generated_tokens"] < max_tokens,
                      "--cache=%s run %d: ran to max_tokens" %
                      (cache, index + 1))


def check_examples(spanc, model):
    for path in EXAMPLES:
        document = run(spanc, model, path)
        check(all(call["succeeded"] for call in document["runs"][0]["calls"]),
              path + ": a call failed")
        result = answers(document)
        check(len(result) > 0, path + ": no query")
        for name, texts in result.items():
            check(len(texts) > 0, "%s @%s: no answer" % (path, name))
            for text in texts:
                check(text.strip() != "", "%s @%s: empty answer" % (path, name))
            print("%s @%s: %r" % (path, name, texts), flush=True)


def split_queries(path):
    """The single-query programs of a bulk: its params/lets + one query."""
    text = open(path).read()
    starts = [m.start() for m in re.finditer(r"^query\s", text, re.M)]
    header = text[:starts[0]]
    singles = {}
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(text)
        name = re.match(r"query\s+([\w-]+)", text[start:]).group(1)
        singles[name] = header + text[start:end]
    return singles


def check_default_cold_warm(spanc, model):
    """In the default configuration (bf16 prefill, int8 decode: kernels
    chosen per row, not per step), in every span mode and under both
    relocations, a warm cache gives the cold answer run after run."""
    for path in ["examples/rag.span", "examples/bulk_rag.span"]:
        for mode in [[], ["--span-recompute", "1"],
                     ["--span-recompute-end", "0"],
                     ["--span-context", "isolated"],
                     ["--relocation", "rerope"],
                     ["--relocation", "rerope", "--span-recompute", "1"]]:
            runs = run(spanc, model, path, "--repeat", "3", *mode)
            cold = answers(runs, 0)
            for index in (1, 2):
                check(cold == answers(runs, index),
                      "%s %s: run %d answers differ from the cold run: %r vs "
                      "%r" % (path, " ".join(mode) or "(default)", index + 1,
                              cold, answers(runs, index)))
            check(all(call["reused_tokens"] > 0
                      for call in runs["runs"][1]["calls"]),
                  "%s %s: the warm run reused nothing" %
                  (path, " ".join(mode) or "(default)"))
            if not mode:
                default_answers = cold
        # The bf16 prompt GEMMs' two weight sources (the borrowed 4-bit
        # tiles, unpacked per call, or a bf16 copy) give the same bits, so
        # the same answers (without AMX or AVX-512 BF16 both run oneDNN's
        # copy).
        copied = answers(run(spanc, model, path, "--gemm-weights", "copy"))
        check(copied == default_answers,
              "%s: --gemm-weights=copy and borrowed answers differ: %r vs %r"
              % (path, copied, default_answers))


def check_invariance(spanc, model):
    check_default_cold_warm(spanc, model)
    exact = ["--batch-invariant"]
    for path in ["examples/rag.span", "examples/bulk_rag.span"]:
        cold_warm = run(spanc, model, path, *exact, "--repeat", "2")
        cold = answers(cold_warm, 0)
        print("%s: %r" % (path, cold), flush=True)
        check(cold == answers(cold_warm, 1),
              path + ": cold and warm cache answers differ: %r vs %r" %
              (cold, answers(cold_warm, 1)))
        warm_calls = cold_warm["runs"][1]["calls"]
        check(all(call["reused_tokens"] > 0 for call in warm_calls),
              path + ": the warm run reused nothing")
        # rerope's warm run is the one that moves cached spans (a fragment
        # one query cached at one position, another reuses at another).
        # The two strategies round K differently in f16 storage (rerope
        # the rotated K, rope-in-kernel the unrotated one; the executor
        # test bounds the logits), which a long greedy answer can follow
        # past a near-tie; with f32 K/V they differ only by f32 rounding.
        rerope_runs = run(spanc, model, path, *exact, "--relocation",
                          "rerope", "--repeat", "2", "--kv-precision", "f32")
        in_kernel = answers(run(spanc, model, path, *exact,
                                "--kv-precision", "f32"))
        for index in range(2):
            rerope = answers(rerope_runs, index)
            check(in_kernel == rerope,
                  path + ": rope-in-kernel and rerope (run %d) answers "
                  "differ: %r vs %r" % (index + 1, in_kernel, rerope))
        if path == "examples/bulk_rag.span":
            relocated = sum(call["relocated_tokens"]
                            for call in rerope_runs["runs"][1]["calls"])
            check(relocated > 0, path + ": the warm rerope run relocated "
                  "nothing, so rerope went untested")
        prefix = answers(run(spanc, model, path, *exact, "--cache", "prefix"))
        off = answers(run(spanc, model, path, *exact, "--cache", "off"))
        check(prefix == off,
              path + ": --cache=prefix and --cache=off differ: %r vs %r" %
              (prefix, off))
        # --cache=span is not compared with off: there a plus's children
        # are independent spans, while prefix/off prefill them causally,
        # so the prompts differ by design (docs/ARCHITECTURE.md, "Span
        # attention").
        if path != "examples/bulk_rag.span":
            continue
        singles = split_queries(path)
        check(len(singles) == len(cold) and len(singles) > 1,
              "bulk_rag.span: split into %d queries" % len(singles))
        directory = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        for name, program in singles.items():
            single = os.path.join(directory, name + ".span")
            with open(single, "w") as file:
                file.write(program)
            alone = answers(run(spanc, model, single, *exact))
            check(alone == {name: cold[name]},
                  "bulk_rag.span @%s: alone %r, in the bulk %r" %
                  (name, alone, cold.get(name)))


def check_bulk(spanc, model):
    """--bulk DIR runs a folder as one bulk: the single-query files split
    from bulk_rag.span give bulk_rag.span's answers, and a query name that
    two files share becomes FILE:QUERY in both."""
    exact = ["--batch-invariant"]
    path = "examples/bulk_rag.span"
    reference = answers(run(spanc, model, path, *exact))
    directory = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    singles = split_queries(path)
    for name, program in singles.items():
        with open(os.path.join(directory, name + ".span"), "w") as file:
            file.write(program)
    # A second file with query @evict: both become FILE:evict.
    with open(os.path.join(directory, "again.span"), "w") as file:
        file.write(singles["evict"])
    with open(os.path.join(directory, "notes.txt"), "w") as file:
        file.write("not a program: --bulk skips it")
    bulk = answers(run(spanc, model, "--bulk " + directory, *exact))
    expected = dict(reference)
    expected["evict:evict"] = expected.pop("evict")
    expected["again:evict"] = expected["evict:evict"]
    check(bulk == expected, "--bulk: %r, expected %r" % (bulk, expected))


def check_bulk_errors(spanc, model):
    """--bulk's errors come before the model loads, so they are checked
    with or without it."""
    empty = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    process = subprocess.run([spanc, "run", "--bulk", empty, "--model", model],
                             capture_output=True, text=True)
    check(process.returncode != 0 and "no .span or .json file" in
          process.stderr, "--bulk on an empty folder: %d %r" %
          (process.returncode, process.stderr))

    # A broken program: its error names file:line:col, and nothing runs.
    broken = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    with open(os.path.join(broken, "good.span"), "w") as file:
        file.write(split_queries("examples/bulk_rag.span")["evict"])
    with open(os.path.join(broken, "bad.span"), "w") as file:
        file.write("query q {\n  gen { user nosuch }\n}\n")
    process = subprocess.run([spanc, "run", "--bulk", broken, "--model",
                              model], capture_output=True, text=True)
    check(process.returncode == 1 and "bad.span:2:" in process.stderr and
          process.stdout == "", "--bulk with a broken program: %d %r" %
          (process.returncode, process.stderr))


def check_progress(spanc, model):
    """The progress line: drawn on a terminal stderr (at once with
    --progress-after 0: how long a run takes depends on the machine), and
    erased at the end; nothing when stderr is not a terminal."""
    command = [spanc, "run", "examples/map_reduce.span", "--model", model,
               "-t", "1", "--progress-after", "0"]
    environment = dict(os.environ, OMP_WAIT_POLICY="passive")
    primary, secondary = pty.openpty()
    process = subprocess.Popen(command, stdout=subprocess.PIPE,
                               stderr=secondary, env=environment)
    os.close(secondary)
    terminal = b""
    while True:
        try:
            data = os.read(primary, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        terminal += data
    stdout = process.communicate()[0]
    os.close(primary)
    check(process.returncode == 0, "progress run failed: %r" % terminal)
    text = terminal.decode("utf-8", "replace")
    lines = re.findall(r"spanc run: (\d+)/(\d+) calls, (\d+) tokens, "
                       r"([\d.]+) s", text)
    check(len(lines) > 0, "no progress line on a terminal: %r" % text)
    if lines:
        done, total, _, elapsed = lines[-1]
        check(int(total) == 5 and int(done) <= 5 and float(elapsed) >= 0.0,
              "progress line %r" % (lines[-1],))
    check(text.endswith("\r\x1b[K"), "progress line not erased: %r" %
          text[-80:])
    check(stdout.strip() != b"", "no answer on stdout")
    process = subprocess.run(command, capture_output=True, env=environment)
    check(process.returncode == 0 and process.stderr == b"",
          "stderr not a terminal, yet it got %r" % process.stderr[:200])


def wait_for(predicate, process, seconds, what):
    """Polls `predicate` every 5 ms for up to `seconds`; fails the check
    (and returns False) when it never holds or `process` ended first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        if process.poll() is not None:
            check(False, "%s: the process ended first (exit %d)" %
                  (what, process.returncode))
            return False
        time.sleep(0.005)
    check(False, "%s: not within %d s" % (what, seconds))
    return False


def stop(process, signal_number, what):
    """Sends the signal and returns (exit code, stderr text, seconds to
    exit); a process that does not stop within 20 s is killed."""
    sent = time.monotonic()
    process.send_signal(signal_number)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        check(False, "%s: still running 20 s after the signal" % what)
    stderr = process.stderr.read().decode("utf-8", "replace")
    return process.returncode, stderr, time.monotonic() - sent


def check_signal_index(spanc):
    """spanc index stops between two files on SIGTERM: exit 143, a message,
    the index file byte for byte as before and no journal left; the next
    refresh then does the whole work."""
    with tempfile.TemporaryDirectory() as scratch:
        corpus = os.path.join(scratch, "corpus")
        indexes = os.path.join(scratch, "indexes")
        os.makedirs(corpus)
        for number in range(20):
            with open(os.path.join(corpus, "first-%04d.md" % number), "w") as f:
                f.write("Paragraph %d of the first batch.\n" % number)
        command = [spanc, "index", corpus, "--index-dir", indexes]
        first = subprocess.run(command, capture_output=True, text=True)
        check(first.returncode == 0, "index: %s" % first.stderr)
        [index_file] = glob.glob(os.path.join(indexes, "*.sqlite"))
        with open(index_file, "rb") as f:
            before = hashlib.sha256(f.read()).hexdigest()
        # Enough files that the refresh is still running when its journal
        # appears (each file is a few thousand distinct words).
        for number in range(3000):
            with open(os.path.join(corpus, "more-%04d.md" % number), "w") as f:
                f.write(" ".join("w%d" % (number * 577 + word)
                                 for word in range(400)) + "\n")
        process = subprocess.Popen(command, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        journal = index_file + "-journal"
        if wait_for(lambda: os.path.exists(journal), process, 60,
                    "index journal"):
            code, stderr, seconds = stop(process, signal.SIGTERM, "index")
            print("index: SIGTERM -> exit %d in %.3f s: %s" %
                  (code, seconds, stderr.strip()), flush=True)
            check(code == 143, "index: exit %d after SIGTERM" % code)
            check("spanc index: interrupted by SIGTERM: the index of" in stderr
                  and "is as it was" in stderr,
                  "index: no interrupt message: %r" % stderr)
            check(not os.path.exists(journal), "index: journal left behind")
            with open(index_file, "rb") as f:
                after = hashlib.sha256(f.read()).hexdigest()
            check(before == after, "index: the index file changed")
            again = subprocess.run(command, capture_output=True, text=True)
            check(again.returncode == 0 and "3000 added, 0 changed, 20 "
                  "unchanged" in again.stdout,
                  "index after the interrupt: %r %r" % (again.stdout,
                                                       again.stderr))
        else:
            process.kill()
            process.wait()


def check_signal_generate(spanc, model):
    """spanc generate stops between two tokens: SIGINT ends the streamed
    text with a newline and exits 130; with -o the file is left as it was
    (written only when complete, through a temporary file)."""
    prompt = "1, 2, 3, 4, 5, 6, 7,"
    command = [spanc, "generate", prompt, "--model", model, "-n", "4000"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    first = process.stdout.read(1)  # the first token is out
    check(first != b"", "generate: no output before the signal")
    code, stderr, seconds = stop(process, signal.SIGINT, "generate")
    rest = process.stdout.read()
    print("generate: SIGINT -> exit %d in %.3f s: %s" %
          (code, seconds, stderr.strip().splitlines()[-1:]), flush=True)
    check(code == 130, "generate: exit %d after SIGINT" % code)
    check(re.search(r"spanc generate: interrupted by SIGINT: stopped after "
                    r"\d+ tokens", stderr) is not None,
          "generate: no interrupt message: %r" % stderr)
    check((first + rest).endswith(b"\n"), "generate: text not ended")

    with tempfile.TemporaryDirectory() as scratch:
        output = os.path.join(scratch, "completion.txt")
        with open(output, "w") as f:
            f.write("before\n")
        process = subprocess.Popen(command + ["-o", output],
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        time.sleep(1.5)  # loaded and generating: 4000 tokens take longer
        code, stderr, _ = stop(process, signal.SIGTERM, "generate -o")
        check(code == 143, "generate -o: exit %d after SIGTERM" % code)
        with open(output) as f:
            check(f.read() == "before\n", "generate -o: the file changed")
        check(os.listdir(scratch) == ["completion.txt"],
              "generate -o: left %r" % os.listdir(scratch))
        # Uninterrupted, the file holds the whole completion.
        done = subprocess.run(command[:-1] + ["8", "-o", output],
                              capture_output=True, text=True)
        with open(output) as f:
            text = f.read()
        check(done.returncode == 0 and text.strip() != "" and
              text != "before\n", "generate -o: %r %r" % (text, done.stderr))


def check_signal_run(spanc, model):
    """spanc run stops between two scheduler steps: SIGINT exits 130 with a
    message saying how far it got."""
    with tempfile.TemporaryDirectory() as scratch:
        program = os.path.join(scratch, "long.span")
        with open(program, "w") as f:
            f.write('query q { gen(max_tokens = 4000, temperature = 0) '
                    '{ user "Count from 1 to 10000, separated by commas." } }\n')
        process = subprocess.Popen(
            [spanc, "run", program, "--model", model],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = process.stdout.read(1)  # the answer is streaming
        check(first != b"", "run: no output before the signal")
        code, stderr, seconds = stop(process, signal.SIGINT, "run")
        print("run: SIGINT -> exit %d in %.3f s: %s" %
              (code, seconds, stderr.strip()), flush=True)
        check(code == 130, "run: exit %d after SIGINT" % code)
        check("spanc run: interrupted by SIGINT: stopped between two steps "
              "of run 1 of 1, 0 of 1 calls finished" in stderr,
              "run: no interrupt message: %r" % stderr)


def main():
    spanc, group = os.path.abspath(sys.argv[1]), sys.argv[2]
    model = os.path.join(os.environ.get("SPANC_ROOT", ""), "models",
                         "SmolLM2-135M-Instruct.Q4_1.gguf")
    if group == "bulk":
        check_bulk_errors(spanc, model)
    if group == "signals":
        check_signal_index(spanc)
    level = os.environ.get("SPANC_ISA")
    if level:
        paths = subprocess.run([spanc, "cpu", "--paths"], capture_output=True,
                               text=True, check=True).stdout.split()
        if level not in paths:
            print("spanc-isa: skipped %s: not a path of this CPU (it runs %s)"
                  % (level, " ".join(paths)))
            return 0
        print("spanc-isa: ran %s" % level)
    if not os.environ.get("SPANC_ROOT") or not os.path.exists(model):
        # tools/setup.sh installs the model before it links .venv: with
        # .venv there the set-up ran, and a missing model must not pass.
        root = os.environ.get("SPANC_ROOT", "")
        if root and os.path.exists(os.path.join(root, ".venv")):
            print("FAIL: no model at %s although tools/setup.sh ran (%s "
                  "exists); run it again" % (model,
                                             os.path.join(root, ".venv")))
            return 1
        print("SKIPPED: no model at %s (run tools/setup.sh; Bazel sets "
              "SPANC_ROOT to the workspace)" % model)
        return 1 if failures else 0
    {"examples": check_examples, "invariance": check_invariance,
     "readme": check_readme,
     "bulk": check_bulk, "progress": check_progress,
     "signals": lambda spanc, model: (check_signal_generate(spanc, model),
                                      check_signal_run(spanc, model))}[group](
        spanc, model)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
