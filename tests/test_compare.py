"""Paired bootstrap comparison of two evaluations (``ragteam compare`` / ``eval --compare-to``)."""

import json
import random

import pytest

from ragteam.graphs.apps.cli import main
from ragteam.graphs.eval.compare import compare_by_type, compare_runs, paired_bootstrap


def write_predictions(path, scores):
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "predictions.jsonl", "w") as handle:
        for i, f1 in enumerate(scores):
            handle.write(json.dumps({"id": f"q{i}", "f1": f1, "em": float(f1 == 1.0), "acc": float(f1 > 0)}) + "\n")
    return path


def test_a_consistent_gain_is_significant_and_noise_is_not():
    rng = random.Random(1)
    a = [rng.random() for _ in range(200)]
    better = [min(1.0, x + 0.05 + rng.gauss(0, 0.02)) for x in a]
    gain = paired_bootstrap(a, better)
    assert gain.significant and gain.low > 0 and gain.low < gain.difference < gain.high
    noise = [x + rng.gauss(0, 0.2) for x in a]  # same mean, large per-question spread
    assert not paired_bootstrap(a, noise).significant


def test_pairing_detects_what_an_unpaired_view_would_miss():
    # question difficulty varies a lot, the gain is small but always there
    rng = random.Random(2)
    a = [rng.choice([0.0, 1.0]) * rng.random() for _ in range(200)]
    b = [x + 0.02 for x in a]
    result = paired_bootstrap(a, b)
    assert result.difference == pytest.approx(0.02)
    assert result.low == pytest.approx(0.02) and result.wins == 200 and result.losses == 0


def test_same_seed_same_interval_and_mismatched_inputs_are_refused(tmp_path):
    a = [0.1, 0.5, 0.0, 1.0]
    assert paired_bootstrap(a, a[::-1], seed=3) == paired_bootstrap(a, a[::-1], seed=3)
    with pytest.raises(ValueError, match="equal lengths"):
        paired_bootstrap([0.1], [0.1, 0.2])
    first = write_predictions(tmp_path / "a", [0.0, 0.5, 1.0])
    second = write_predictions(tmp_path / "b", [0.0, 0.5])
    with pytest.raises(ValueError, match="different questions"):
        compare_runs(first, second)


def test_a_bad_prediction_line_names_file_and_line(tmp_path):
    folder = write_predictions(tmp_path / "a", [0.5])
    with open(folder / "predictions.jsonl", "a") as handle:
        handle.write("{not json\n")
    with pytest.raises(ValueError, match=r"predictions.jsonl:2"):
        compare_runs(folder, folder)


def test_cli_prints_and_writes_the_table(tmp_path, capsys):
    a = write_predictions(tmp_path / "a", [0.0, 0.2, 0.4, 0.0] * 10)
    b = write_predictions(tmp_path / "b", [0.5, 0.2, 0.9, 0.0] * 10)
    assert main(["compare", str(a), str(b / "predictions.jsonl"), "--out", str(tmp_path / "t.md")]) == 0
    printed = capsys.readouterr().out
    assert "| f1 | 15.0 | 40.0 | +25.0 *" in printed and "20 / 0" in printed
    assert (tmp_path / "t.md").read_text().strip() == printed.strip()
    assert main(["compare", str(a), str(tmp_path / "missing")]) == 2


def test_the_difference_by_question_type_pairs_each_types_questions(tmp_path, capsys):
    # q0..q3 are 1-hop, q4..q7 3-hop: B gains 0.4 on every 3-hop question and loses 0.1 on each 1-hop one
    a = write_predictions(tmp_path / "a", [0.5, 0.5, 0.5, 0.5, 0.0, 0.2, 0.1, 0.0])
    b = write_predictions(tmp_path / "b", [0.4, 0.4, 0.4, 0.4, 0.4, 0.6, 0.5, 0.4])
    types = {f"q{i}": "hops-1" if i < 4 else "hops-3" for i in range(8)}
    rows = compare_by_type(a, b, types)
    assert list(rows) == ["hops-1", "hops-3"]
    assert rows["hops-3"].difference == pytest.approx(0.4) and rows["hops-3"].questions == 4
    assert rows["hops-3"].low == pytest.approx(0.4) and rows["hops-3"].wins == 4  # same gain: a point interval
    assert rows["hops-1"].difference == pytest.approx(-0.1) and rows["hops-1"].losses == 4
    with pytest.raises(ValueError, match=r"2 of the compared questions have no type .*'q6'"):
        compare_by_type(a, b, {k: v for k, v in types.items() if k not in ("q6", "q7")})

    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps({"id": q, "question": "Who?", "golden_answers": ["x"],
                                        "metadata": {"type": t}}) + "\n" for q, t in types.items()))
    assert main(["compare", str(a), str(b), "--by-type", str(data)]) == 0
    printed = capsys.readouterr().out
    assert "| f1 | 28.8 | 43.8 | +15.0" in printed
    assert "| hops-1 | 4 | 50.0 | 40.0 | -10.0 * | [-10.0, -10.0] | 0 / 4 |" in printed
    assert "| hops-3 | 4 | 7.5 | 47.5 | +40.0 * | [+40.0, +40.0] | 4 / 0 |" in printed
