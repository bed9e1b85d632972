"""SIGTERM as a clean exit: ``kill``, ``timeout``, a CI runner or a scheduler stopping a sitting
then unwind through ``sys.exit`` (exit status 128 + SIGTERM), so ``finally`` blocks and atexit
hooks run — a vLLM engine's worker processes are shut down instead of outliving the process, and
the learning recipe records the stopped stage's time.

SIGKILL (the kernel's OOM killer, Ray's memory monitor, ``kill -9``) runs no handler: there the
engine's own processes end themselves when the process that started them dies
(``end_with_parent``, a vLLM plugin), instead of each holding its KV cache on its own.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

# the pid of the process that started this one, set by ragteam where an engine starts
# (nodes.policies.vllm._engine_environment) and by each engine process for its own children
PARENT_MARK = "RAGTEAM_ENGINE_PARENT"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def exit_on_sigterm() -> None:
    """Install the handler. Only from the main thread and only over the default action: a host
    with its own handler (Ray's workers) keeps it."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL):
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def end_with_parent() -> None:
    """vLLM's plugin hook, run in every process of an engine (pyproject.toml): in a direct child
    of the process ``PARENT_MARK`` names, ask the kernel for SIGKILL when that parent dies. Any
    other process does nothing: the starting process itself, one that merely inherited the mark
    (a Ray worker started by a raylet), a vLLM engine ragteam did not start, a platform without
    ``prctl``."""
    parent = os.environ.get(PARENT_MARK, "")
    if not parent.isdigit() or os.getppid() != int(parent) or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return
    if os.getppid() != int(parent):  # the parent died just before the request: end as it would have
        os._exit(128 + signal.SIGKILL)
    os.environ[PARENT_MARK] = str(os.getpid())  # this process's own children follow it in turn
