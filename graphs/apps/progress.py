"""Progress of a long job (an eval, a training run) wherever it runs.

On a terminal it is a tqdm bar. Anywhere else — ``nohup``, CI, a log file — a bar prints nothing
useful, so a plain line goes to stderr every ``interval`` seconds (and at the end) with
done/total, rate, ETA and the job's running figures. ``quiet`` prints nothing.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

LOG_LEVELS = ("debug", "info", "warning", "error")  # progress lines are "info"


def add_progress_options(parser) -> None:
    """``--quiet`` and ``--log-level``, for every command with a long job."""
    parser.add_argument("--quiet", action="store_true", help="no progress output (errors still print)")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                        help="info (default) prints progress; warning or error keep only problems")


def progress_mode(args) -> str:
    """bar | lines | off, from ``--quiet``/``--log-level`` and whether stderr is a terminal."""
    if getattr(args, "quiet", False) or getattr(args, "log_level", "info") in ("warning", "error"):
        return "off"
    return "bar" if sys.stderr.isatty() else "lines"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def quiet_libraries(mode: str) -> None:
    """Keep libraries' own output from burying ours: their progress bars (model loading, shard
    writing) only on a terminal, and no DeepSpeed accelerator warning on a machine with no GPU,
    where CPU is not a guess but the only choice. Call before those libraries load."""
    import os

    if mode != "bar":
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        try:
            from transformers.utils import logging as transformers_logging
            transformers_logging.disable_progress_bar()
        except ImportError:
            pass
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


class Progress:
    """``update()`` as items finish; ``close()`` at the end."""

    def __init__(self, total: int, desc: str, unit: str = "q", mode: str = "lines", initial: int = 0,
                 interval: float = 30.0, stream: TextIO | None = None):
        self.total, self.desc, self.unit, self.mode = total, desc, unit, mode
        self.done, self.start_done = initial, initial
        self.interval, self.stream = interval, stream or sys.stderr
        self.started = self.last_line = time.monotonic()
        self.figures: dict[str, str] = {}
        self.shown = initial  # ``done`` when the last line was printed
        self.bar = None
        if mode == "bar":
            from tqdm.auto import tqdm
            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, file=self.stream)

    def update(self, n: int = 1, **figures: str) -> None:
        self.done += n
        self.figures.update(figures)
        if self.bar is not None:
            if figures:
                self.bar.set_postfix(**self.figures)
            self.bar.update(n)
        elif self.mode == "lines" and time.monotonic() - self.last_line >= self.interval:
            self.line()

    def line(self) -> None:
        """One progress line: done/total, rate, ETA, figures."""
        elapsed = time.monotonic() - self.started
        rate = (self.done - self.start_done) / elapsed if elapsed > 0 else 0.0
        left = self.total - self.done
        eta = _duration(left / rate) if rate > 0 else "?"
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        extra = "".join(f", {k} {v}" for k, v in self.figures.items())
        print(f"{self.desc}: {self.done}/{self.total} {self.unit}{share}, {rate:.3g} {self.unit}/s, "
              f"elapsed {_duration(elapsed)}, ETA {eta}{extra}", file=self.stream, flush=True)
        self.last_line, self.shown = time.monotonic(), self.done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.mode == "lines" and self.done > self.shown:
            self.line()
