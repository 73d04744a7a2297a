"""glibc's allocator tuned at processor start (processor/cli/malloc.py): large freed buffers go back at once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# In a fresh interpreter: a 20 MB buffer freed twice; the resident size left afterwards (KiB). With glibc's
# defaults the first free raises the mmap threshold to 20 MB, so the second buffer comes from the heap and stays
# (the heap is only trimmed above twice that); tuned, both are their own mappings, unmapped when freed.
PROBE = """
import sys
if sys.argv[1] == "tuned":
    from processor.cli.malloc import tune_malloc
    assert tune_malloc()
def rss():
    with open("/proc/self/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0])
before = rss()
for _ in range(2):
    block = bytearray(20_000_000)
    block[::4096] = b"x" * len(block[::4096])
    del block
print(rss() - before)
"""


def _kept(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_a_large_freed_buffer_is_given_back_once_tuned() -> None:
    assert _kept("default") > 15_000  # the probe shows the problem: glibc kept the second buffer
    assert _kept("tuned") < 5_000
