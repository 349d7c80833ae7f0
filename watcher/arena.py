"""One malloc arena for the ``inspect-watch`` process (glibc), unless the user chose.

A watch reads logs and control channels in threads and reports in the main thread: what
a reader thread allocates outside Python's small-object allocator (decoded samples'
large strings and lists, RE2's buffers) comes from that thread's own glibc arena, and
freeing it from another thread leaves the arena's pages in use. With one arena a post-hoc
scan of the 375 shared SWE-bench runs peaks about 4 MB lower (69 to 65 MB) at the same
CPU (benchmarks/bench_cost.py prints the peak). Threads here take turns under the GIL,
so sharing one arena's lock costs nothing measurable.

Only the command line sets it (:func:`watcher.cli.main`): a program that imports the
package keeps its own allocator settings, and ``MALLOC_ARENA_MAX`` in the environment
(glibc reads it at start) is left to win.
"""

from __future__ import annotations

import os
import sys

M_ARENA_MAX = -8  # glibc's malloc.h


def one_malloc_arena() -> bool:
    """Ask glibc for a single malloc arena; whether it was set (False elsewhere: not
    Linux, another C library, or ``MALLOC_ARENA_MAX`` set by the user)."""
    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no mallopt: not glibc
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, 1))
