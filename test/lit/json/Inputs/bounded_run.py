"""Runs a command and prints what it cost: its stderr, its exit status and
the bytes of stderr, and whether its peak memory (above the same program's
`--help`, which loads the same libraries) and its time stayed within the
bounds given. The bounds are wide: what is checked is that neither grows
with the input (gigabytes and minutes before), not a speed.

    bounded_run.py MAX_EXTRA_MIB MAX_SECONDS COMMAND...
"""
import os
import subprocess
import sys
import time


def run(command, **options):
    """(exit status, peak resident MiB, stderr bytes) of one command."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, **options)
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage.ru_maxrss / 1024.0, stderr


max_extra_mib, max_seconds = float(sys.argv[1]), float(sys.argv[2])
command = sys.argv[3:]
_, baseline_mib, _ = run([command[0], "--help"])
start = time.monotonic()
code, peak_mib, stderr = run(command)
seconds = time.monotonic() - start
sys.stdout.write(stderr.decode("utf-8", "replace"))
print("exit %d, stderr %d bytes" % (code, len(stderr)))
extra = peak_mib - baseline_mib
print("memory %s" % ("bounded" if extra <= max_extra_mib else
                     "%.0f MiB over the baseline > %g MiB" %
                     (extra, max_extra_mib)))
print("time %s" % ("bounded" if seconds <= max_seconds else
                   "%.1f s > %g s" % (seconds, max_seconds)))
