"""Progress wherever it runs: eval and training print progress lines when stderr is not a terminal
(none with ``--quiet``), at their interval and once at the end, with the step's figures."""

import subprocess
import sys
from pathlib import Path

import pytest

from ragteam.stores.jsonl import read_records

ROOT = Path(__file__).resolve().parents[1]


def test_eval_prints_progress_lines_when_stderr_is_not_a_terminal(tmp_path):
    done = subprocess.run([sys.executable, "-m", "ragteam.graphs.apps.cli", "eval", "--graph", "llm_only", "--policy",
                           "scripted", "--limit", "3", "--out", str(tmp_path / "o")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "eval llm_only: 3/3 q (100%)" in done.stderr and "ETA" in done.stderr
    quiet = subprocess.run([sys.executable, "-m", "ragteam.graphs.apps.cli", "eval", "--graph", "llm_only", "--policy",
                            "scripted", "--limit", "4", "--out", str(tmp_path / "o"), "--quiet"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0 and "eval llm_only" not in quiet.stderr


def test_progress_lines_come_at_the_interval_and_once_at_the_end():
    import io

    from ragteam.graphs.apps.progress import Progress

    stream = io.StringIO()
    progress = Progress(4, "job", "q", "lines", interval=0.0, stream=stream)
    progress.update(f1="0.5")
    progress.update()
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("job: 1/4 q (25%)") and "f1 0.5" in lines[0]
    stream = io.StringIO()
    slow = Progress(4, "job", "q", "lines", interval=3600, stream=stream)
    slow.update()
    slow.close()
    assert stream.getvalue().count("\n") == 1  # only the closing line


def test_the_trainer_prints_one_line_per_step_with_its_figures():
    from ragteam.trainers.loop import step_figures

    shown = step_figures({"reward": 0.5, "f1": 0.25, "format_violation_rate": 0.1, "policy_loss": 0.01,
                          "tokens_per_s": 123.4, "lr": 2e-5})
    assert shown == {"reward": "0.500", "f1": "0.250", "viol": "0.10", "policy_loss": "0.01", "tok/s": "123"}


@pytest.mark.slow  # a chain of scripts (or a dense index built twice): tens of seconds
def test_a_training_run_reads_clearly_off_a_terminal_and_resumes_from_its_folder(tmp_path, tiny_model_dir):
    """One step on a tiny model, stderr not a terminal: a progress line per step, no DeepSpeed
    accelerator warning under the torch optimizer, the lr printed as it is; then ``--out DIR
    --resume`` alone continues that run with its own config (graph, model, optimizer)."""
    out = tmp_path / "run"
    first = subprocess.run([sys.executable, "trainers/ppo_graph.py", "--graph", "vanilla_rag", "--model",
                            tiny_model_dir, "--optimizer", "torch", "--steps", "1", "--questions-per-step", "1",
                            "--limit", "2", "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "ppo vanilla_rag (embedded): 1/1 step" in first.stderr and "reward" in first.stderr
    assert "Setting accelerator" not in first.stderr and '"lr": 2e-05' in first.stdout
    again = subprocess.run([sys.executable, "trainers/ppo_graph.py", "--out", str(out), "--resume", "--steps", "2",
                            "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resumed at step 1" in again.stderr and "step (" not in again.stderr  # --quiet: no progress
    assert [row["step"] for row in read_records(out / "metrics.jsonl")] == [1, 2]

