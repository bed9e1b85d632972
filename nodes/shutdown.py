"""SIGTERM as a clean exit: ``kill``, ``timeout``, a CI runner or a scheduler stopping a sitting
then unwind through ``sys.exit`` (exit status 128 + SIGTERM), so ``finally`` blocks and atexit
hooks run — a vLLM engine's worker processes are shut down instead of outliving the process, and
the learning recipe records the stopped stage's time.
"""

from __future__ import annotations

import signal
import sys
import threading


def exit_on_sigterm() -> None:
    """Install the handler. Only from the main thread and only over the default action: a host
    with its own handler (Ray's workers) keeps it."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL):
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
