"""Worker processes that never outlive their parent: a SIGKILLed `propme trace` or lm-eval run must
not leave forked tracing workers behind (they would keep its memory and any file they inherited)."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

#: prctl(2) option: the signal the kernel sends this process when its parent thread dies
PR_SET_PDEATHSIG = 1
#: how often the fallback watcher (other systems than Linux) checks that the parent lives, in seconds
PARENT_CHECK_SECONDS = 1.0


def die_with_parent(parent_pid: int) -> None:
    """Make this (forked) process end when `parent_pid`, its parent, ends: the kernel's parent-death
    signal on Linux, a watcher thread elsewhere; ends at once when the parent is already gone."""
    if not (sys.platform.startswith("linux") and _parent_death_signal()):
        threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="propme-parent-watch").start()
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)


def _parent_death_signal() -> bool:
    """Ask Linux to SIGKILL this process when its parent dies; whether that worked."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_CHECK_SECONDS)
    os._exit(1)
