"""Handing memory a notebook has freed back to the system: what notebook 05 does after its
largest section, for a learner on Binder (2 GB for every kernel of the session).

On Linux, glibc's allocator keeps memory that a program frees inside the program when the freed
blocks sit in the middle of its heap: after notebook 05 frees the attention weights and hidden
states of its 480 sentences, its kernel still holds about 120 MB of them, unused but counted
against the machine's memory until the kernel shuts down. `release_freed_memory()` collects
Python's garbage and then asks glibc to return every free page (`malloc_trim(0)`). It frees
nothing that is still in use and changes no result. Elsewhere (macOS, Windows, a Linux without
glibc) the allocator works differently, and the function only collects garbage.
"""

from __future__ import annotations

import ctypes
import gc
import sys

__all__ = ["release_freed_memory"]


def release_freed_memory() -> bool:
    """gc.collect(), then glibc's malloc_trim(0) on Linux; True if malloc_trim ran."""
    gc.collect()
    if not sys.platform.startswith("linux"):
        return False
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim  # glibc only
    except (OSError, AttributeError):
        return False
    trim(0)
    return True
