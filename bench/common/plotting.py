"""What the benchmarks' plot scripts share (bench/NAME/plot.py imports it
from this folder)."""
import csv
import math
import os
import sys


def wilson(k, n, z=1.959963984540054):
    """The Wilson 95% interval of k successes in n trials (the one the
    result tables print, bench/common/ModelSession's wilsonInterval)."""
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return c - h, c + h


def quantile(values, q):
    """Linear interpolation between order statistics (as Report.cpp)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def read_tsv_or_exit(path, what, script):
    """The rows of a tab-separated file with a header line; a missing or
    empty file is a one-line error naming `what` would write it, and exit
    status 1."""
    problem = None
    if not os.path.exists(path):
        problem = f"missing {path} ({what})"
    else:
        with open(path) as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        if not rows:
            problem = f"{path} has no rows ({what})"
    if problem:
        print(f"{script}: {problem}", file=sys.stderr)
        sys.exit(1)
    return rows
