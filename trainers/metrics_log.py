"""Training metrics: one JSON line per step, TensorBoard scalars, and a learning-curve PNG."""

from __future__ import annotations

from pathlib import Path

from ragteam.stores.atomic import save_figure
from ragteam.stores.jsonl import append_records, read_records, write_records

CURVES = (("reward", "mean reward per run"), ("f1", "answer F1"),
          ("format_violation_rate", "format-violation rate"), ("value_loss", "value loss"))


class MetricsLog:
    def __init__(self, out: Path, resume_step: int = 0, tensorboard: bool = True):
        self.path = out / "metrics.jsonl"
        self.out = out
        self._drop_after(resume_step)  # steps past the checkpoint are recomputed on resume
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
                self.writer = SummaryWriter(str(out / "tensorboard"), purge_step=resume_step + 1)
            except ImportError:  # tensorboard not installed: JSONL and PNG still written
                self.writer = None

    def _drop_after(self, step: int) -> None:
        if not self.path.exists():
            return
        write_records(self.path, [row for row in self.read() if row.get("step", 0) <= step])

    def read(self) -> list[dict]:
        """Every step's line (a line a kill cut short is not one)."""
        if not self.path.exists():
            return []
        return [row for row in read_records(self.path) if isinstance(row, dict)]

    def write(self, step: int, metrics: dict) -> None:
        append_records(self.path, [{"step": step, **metrics}])
        if self.writer is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)):
                    self.writer.add_scalar(key, value, step)
            self.writer.flush()

    def plot(self) -> Path | None:
        rows = self.read()
        if not rows:
            return None
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(1, len(CURVES), figsize=(4 * len(CURVES), 3.2))
        for axis, (key, title) in zip(axes, CURVES):
            points = [(r["step"], r[key]) for r in rows if key in r]
            if points:
                axis.plot(*zip(*points), marker="o", markersize=3)
            axis.set_title(title)
            axis.set_xlabel("step")
        figure.tight_layout()
        path = self.out / "learning_curve.png"
        save_figure(figure, path, dpi=110)
        plt.close(figure)
        return path

    def close(self) -> None:
        """Flush and close TensorBoard's writer (the JSONL file is closed after every line)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
