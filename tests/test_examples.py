"""The examples a newcomer copies from must keep working."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_example(*args, timeout=600):
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_custom_graph_example_builds_and_runs_both_graphs():
    out = run_example("examples/custom_graph.py", "--policy", "scripted")
    assert out.count("answer: Kiss and Tell (1945 film)") == 2
    assert "nodes: ['as_asked/RA', 'keywords/RA', 'DS', 'AG']" in out


@pytest.mark.slow
def test_quickstart_runs_on_the_offline_model(tmp_path):
    out = run_example("examples/quickstart.py", "2")
    assert out.count("\nQ: ") == 2 and "transitions written to runs/quickstart.jsonl" in out
