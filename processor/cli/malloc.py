"""glibc's allocator told to give large freed buffers back at once (`dispersion processor` calls it at start).

A 100,000-transfer batch moves buffers of 24-40 MB through the processor (its JSON text, the file, the bank's
answers). glibc's defaults keep much of that after it is freed: a freed large block raises the threshold under
which blocks come from the heap instead of their own mapping (up to 32 MiB), and the heap is only trimmed above
twice that, so the next buffers land in kept memory that fragments; every thread that allocates also gets its own
heap (up to 8 per core). Measured with `benchmarks/big_batch.py` (docs/benchmarks.md): peak RSS 435 -> 337 MiB,
and 177 MiB instead of 250-300 MiB between the peaks, at no measurable CPU cost. Fixed thresholds (128 KiB, as
glibc starts) keep every block of that size or more in its own mapping, returned when freed; two heaps suffice for
an event loop and the store's worker threads. The environment's `MALLOC_*_` variables, when set, win.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
THRESHOLD = 128 * 1024
ARENAS = 2

_SETTINGS = (
    ("MALLOC_TRIM_THRESHOLD_", M_TRIM_THRESHOLD, THRESHOLD),
    ("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, THRESHOLD),
    ("MALLOC_ARENA_MAX", M_ARENA_MAX, ARENAS),
)


def tune_malloc() -> bool:
    """Set glibc's trim and mmap thresholds and its arena count (see the module docstring), each unless its
    environment variable is set. False where there is no glibc (another C library or system): nothing changed."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = True
    for variable, option, value in _SETTINGS:
        if variable not in os.environ:
            done = mallopt(option, value) == 1 and done
    return done
