#!/usr/bin/env python3
"""Compares two greedy reference files of make_greedy_reference.py's format:
tokens identical until the first divergence per prompt, the margins there,
and the mean/max difference of the top-2 log-probabilities both report.

Usage: compare_greedy.py A.json B.json
"""
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
matched = compared = 0; worst = 0.0; total = 0.0; n = 0
for ca, cb in zip(a["cases"], b["cases"]):
    ea, eb = ca["continuation_ids"], cb["continuation_ids"]
    for i in range(min(len(ea), len(eb))):
        for r in range(2):
            if ca["top2"][i]["ids"][r] == cb["top2"][i]["ids"][r]:
                d = abs(ca["top2"][i]["logprobs"][r] - cb["top2"][i]["logprobs"][r]); worst = max(worst, d); total += d; n += 1
        compared += 1
        if ea[i] != eb[i]:
            print(f"{ca['name']}: step {i}: {ea[i]} vs {eb[i]}, margins {ca['top2'][i]['logit_margin']:.4f} / {cb['top2'][i]['logit_margin']:.4f}")
            break
        matched += 1
print(f"{matched}/{compared} identical; |dlogprob| mean {total/max(n,1):.4f} max {worst:.4f}")
