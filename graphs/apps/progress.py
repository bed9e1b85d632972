"""Progress of a long job (an eval, a training run) wherever it runs.

On a terminal it is a tqdm bar. Anywhere else — ``nohup``, CI, a log file — a bar prints nothing
useful, so a plain line goes to stderr every ``interval`` seconds (and at the end) with
done/total, rate, ETA and the job's running figures. ``quiet`` prints nothing.

The rate behind the ETA is the one observed over recent completions, not the average since the
start: the time before the first completion (loading a model, starting an engine, the first
batch of concurrent runs) and the items a resumed job found done say nothing about how fast the
rest will go, and counting them made a 6-minute eval announce 41 minutes.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Callable, TextIO

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


class CompletionRate:
    """Items per second over recent completions, measured from the first one.

    Completions are kept as marks (time, items done), one per ``burst_s`` at most: concurrent
    runs finish in bursts, and a burst counted over the milliseconds it took would make the rate
    absurd. The rate runs from the newest mark at least ``window_s`` old (else the first mark, the
    end of the warm-up) to now, so it follows a job that speeds up or stalls. None until two
    marks exist: one completion says nothing about the pace."""

    def __init__(self, window_s: float = 300.0, burst_s: float = 1.0):
        self.window_s, self.burst_s = window_s, burst_s
        self.marks: deque[tuple[float, int]] = deque()

    def mark(self, now: float, done: int) -> None:
        if self.marks and now - self.marks[-1][0] < self.burst_s:
            self.marks[-1] = (self.marks[-1][0], done)  # same burst: its start, its latest count
        else:
            self.marks.append((now, done))
        while len(self.marks) > 2 and now - self.marks[1][0] >= self.window_s:
            self.marks.popleft()

    def rate(self, now: float, done: int) -> float | None:
        if len(self.marks) < 2:
            return None
        since, done_then = self.marks[0]
        return (done - done_then) / (now - since) if now > since else None


class Progress:
    """``update()`` as items finish; ``close()`` at the end. ``clock`` (default
    ``time.monotonic``) is replaceable for tests."""

    def __init__(self, total: int, desc: str, unit: str = "q", mode: str = "lines", initial: int = 0,
                 interval: float = 30.0, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.total, self.desc, self.unit, self.mode = total, desc, unit, mode
        self.done = self.initial = initial  # a resumed job's items: shown, never counted in a rate
        self.interval, self.stream, self.clock = interval, stream or sys.stderr, clock
        self.started = self.last_line = clock()
        self.recent = CompletionRate()
        self.figures: dict[str, str] = {}
        self.shown = initial  # ``done`` when the last line was printed
        self.bar = None
        if mode == "bar":
            from tqdm.auto import tqdm
            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, file=self.stream)

    def update(self, n: int = 1, **figures: str) -> None:
        self.done += n
        self.recent.mark(self.clock(), self.done)
        self.figures.update(figures)
        if self.bar is not None:
            if figures:
                self.bar.set_postfix(**self.figures)
            self.bar.update(n)
        elif self.mode == "lines" and self.clock() - self.last_line >= self.interval:
            self.line()

    def eta_s(self) -> float | None:
        """Seconds left at the recent rate (None while it is unknown; 0 when done)."""
        left = self.total - self.done
        if left <= 0:
            return 0.0
        rate = self.recent.rate(self.clock(), self.done)
        return left / rate if rate else None

    def line(self) -> None:
        """One progress line: done/total, rate, ETA, figures."""
        now = self.clock()
        elapsed = now - self.started
        rate, eta = self.recent.rate(now, self.done), self.eta_s()
        if self.done >= self.total and elapsed > 0:  # the closing line: the job's own average
            rate = (self.done - self.initial) / elapsed
        rate_text = "?" if rate is None else f"{rate:.3g}"
        eta_text = "?" if eta is None else _duration(eta)
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        extra = "".join(f", {k} {v}" for k, v in self.figures.items())
        print(f"{self.desc}: {self.done}/{self.total} {self.unit}{share}, {rate_text} {self.unit}/s, "
              f"elapsed {_duration(elapsed)}, ETA {eta_text}{extra}", file=self.stream, flush=True)
        self.last_line, self.shown = now, self.done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.mode == "lines" and self.done > self.shown:
            self.line()
