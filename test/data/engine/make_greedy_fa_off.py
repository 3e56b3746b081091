#!/usr/bin/env python3
"""Writes greedy_smollm2_fa_off.json: as test/data/reference's
make_greedy_reference.py (same prompts, protocol and format), with
llama-server's flash attention turned off (`-fa off`).

Usage: make_greedy_fa_off.py BIN_DIR MODEL OUT.json [PORT]
"""
import os, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "reference"))
import make_greedy_reference  # noqa: E402

_popen = subprocess.Popen


def popen_without_flash_attention(command, *args, **kwargs):
    if os.path.basename(command[0]) == "llama-server":
        command = list(command) + ["-fa", "off"]
    return _popen(command, *args, **kwargs)


make_greedy_reference.subprocess.Popen = popen_without_flash_attention

if __name__ == "__main__":
    make_greedy_reference.main()
