"""deploy/router/span_scorer.py: what the KV events say a replica holds,
and which replica a request goes to.

A span cached on replica 1 earns it the request whose prompt has that
document in the middle (the prefix router sees nothing there); removals
and AllBlocksCleared take the credit back; a chain from an unknown parent
and partial blocks are never credited; load outweighs a small reuse.
Run: python3 span_scorer_test.py (standard library only).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "deploy", "router"))
from span_scorer import ClusterIndex, choose, choose_plan  # noqa: E402

B = 4
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL: " + message)


def stored(hashes, parent, tokens, span=False):
    event = ["BlockStored", hashes, parent, tokens, B, None, "GPU", None]
    if span:
        event.append([["spanc:span"]] * len(hashes))
    return event


system = [1, 2, 3, 4, 5, 6, 7, 8]           # two blocks
document = list(range(100, 110))            # two full blocks, a partial one
question = [900, 901, 902]
# The document after the system prompt and one token of something else:
# its blocks sit at offset 9, not on a block boundary of the prompt.
prompt = system + [55] + document + question

index = ClusterIndex(2, B)
index.apply(0, stored([10, 11], None, system))
index.apply(1, stored([10, 11], None, system))
index.apply(1, stored([20, 21, 22], 11, document, span=True))
check(index.reuse(prompt, spans=False) == {0: 8, 1: 8},
      "the prefix router credits both replicas the system prompt alone: %s"
      % index.reuse(prompt, spans=False))
check(index.reuse(prompt) == {0: 8, 1: 16},
      "the span scorer adds replica 1's two full span blocks anywhere: %s"
      % index.reuse(prompt))
check(choose(index, prompt, [0, 0]) == 1, "span-aware goes to replica 1")
check(choose(index, prompt, [0, 0], spans=False) == 0,
      "prefix-only ties and takes the first")
check(choose(index, prompt, [0, 20]) == 0,
      "20 queued tokens outweigh 8 reused ones")

index.apply(1, ["BlockRemoved", [20], "GPU"])
check(index.reuse(prompt) == {0: 8, 1: 12}, "a removed span block is "
      "no longer credited: %s" % index.reuse(prompt))
index.apply(1, ["BlockRemoved", [11], "GPU"])
check(index.reuse(prompt, spans=False) == {0: 8, 1: 4},
      "a removed chain block cuts the chain there: %s"
      % index.reuse(prompt, spans=False))
index.apply(0, stored([30], 999, [7, 7, 7, 7]))
check(index.reuse([7, 7, 7, 7]) == {}, "a chain from an unknown parent "
      "(a tail after a plus) is not credited")
index.apply(1, ["AllBlocksCleared"])
check(index.reuse(prompt) == {0: 8}, "AllBlocksCleared forgets replica 1")
check(not any(replica == 1 for holders in index.holders.values()
              for replica in holders), "nothing of replica 1 is left")

# Scoring by block id, on spanc's layout of the request (request_plan.py):
# a system prompt's chain, then two spans that each chain from it.
plan = [(4, 10, 0), (4, 11, 10), (4, 20, 11), (2, 21, 20), (4, 30, 11)]
index = ClusterIndex(2, B)
index.apply(0, stored([10, 11], None, system))
index.apply(1, stored([10, 11], None, system))
index.apply(1, stored([30], 11, [40, 41, 42, 43], span=True))
index.apply(1, stored([20, 21], 11, document[:6], span=True))
check(index.reuse_plan(plan) == {0: 8, 1: 18},
      "by id, every block held counts, the partial one too: %s"
      % index.reuse_plan(plan))
check(index.reuse_plan(plan, spans=False) == {0: 8, 1: 14},
      "the prefix view stops where the chain breaks (the second span): %s"
      % index.reuse_plan(plan, spans=False))
check(choose_plan(index, plan, [0, 0]) == 1, "span-aware by id: replica 1")
check(choose_plan(index, plan, [0, 0], spans=False) == 1 and
      choose_plan(index, plan, [0, 7], spans=False) == 0,
      "prefix by id: replica 1 unless 7 tokens of load outweigh its 6")
index.apply(1, ["BlockRemoved", [21], "GPU"])
check(index.reuse_plan(plan) == {0: 8, 1: 16},
      "a removed block is no longer credited by id")
index.apply(1, ["AllBlocksCleared"])
check(index.reuse_plan(plan) == {0: 8}, "nor after AllBlocksCleared")

print("%d check(s) failed" % len(failures) if failures else "PASSED")
sys.exit(1 if failures else 0)
