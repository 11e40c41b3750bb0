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


def in_child(fn, on_death):
    """`fn()` in a forked child that dies with this process; its result or exception comes back
    pickled. A child killed by a signal (a native library's abort: Rust's or C++'s allocation
    failure under an address-space limit, which no Python handler can catch), or one that could not
    send its outcome back, raises `on_death(what happened)` here instead of ending this process."""
    import pickle

    parent, (read_end, write_end) = os.getpid(), os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, send back, leave at once (no cleanup of the parent's state)
        os.close(read_end)
        code = 0
        try:
            die_with_parent(parent)
            try:
                outcome = (True, fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the parent, which raises it
                outcome = (False, exc)
            with os.fdopen(write_end, "wb") as fh:
                pickle.dump(outcome, fh)
        except BaseException:  # noqa: BLE001 - an unpicklable outcome: the parent reports the death
            code = 1
        os._exit(code)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as fh:
            data = fh.read()
    finally:
        _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise on_death(f"was stopped by {signal.Signals(os.WTERMSIG(status)).name}")
    if not data:  # it could not even send its outcome back (out of memory while pickling it)
        raise on_death(f"ended without a result (exit status {os.WEXITSTATUS(status)})")
    ok, value = pickle.loads(data)
    if ok:
        return value
    raise value
