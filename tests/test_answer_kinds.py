"""examples/research/phantomwiki/phantomwiki_answer_kinds.py: F1 by hop count and answer kind under a guessing floor,
and the slices of questions where following the hops can pay."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "research" / "phantomwiki"))

from phantomwiki_answer_kinds import answer_kind, main  # noqa: E402


def questions(path, rows):
    path.write_text("".join(json.dumps({"id": qid, "question": f"{qid}?", "golden_answers": golds,
                                        "metadata": {"type": kind, "all_answers_required": True}}) + "\n"
                            for qid, kind, golds in rows))
    return path


@pytest.fixture
def dev(tmp_path):
    return questions(tmp_path / "dev.jsonl", [
        ("c1", "hops-1", ["1"]), ("c3", "hops-3", ["0", "1", "2"]),
        ("n3", "hops-3", ["Ann Lee"]), ("m4", "hops-4", ["A", "B", "C", "D", "E"])])


def test_the_table_splits_by_hops_and_answer_kind_under_the_guessed_count(tmp_path, dev, capsys):
    assert [answer_kind(g) for g in (["1"], ["0", "12"], ["Ann"], ["A", "B", "C"], list("ABCD"))] == \
        ["count", "count", "1-3 names", "1-3 names", ">3 names"]
    train = questions(tmp_path / "train.jsonl", [("t1", "hops-1", ["2"]), ("t2", "hops-2", ["1", "2"]),
                                                 ("t3", "hops-2", ["2"]), ("t4", "hops-1", ["Bo"])])
    run = tmp_path / "eval" / "jade"
    run.mkdir(parents=True)
    (run / "predictions.jsonl").write_text("".join(json.dumps({"id": q, "f1": f1}) + "\n" for q, f1 in
                                                   [("c1", 0.0), ("c3", 0.5), ("n3", 1.0), ("m4", 0.25)]))
    assert main(["table", "--questions", str(dev), "--floor-from", str(train), str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("| run | hops-1 count (1) | hops-3 count (1) | hops-3 1-3 names (1) | "
                        "hops-4 >3 names (1) |")
    # "2" scores best on the training counts: it is 1 of the 3 golds of c3 (F1 2·1·⅓/(1+⅓))
    assert lines[2] == "| guess 2 to every count | 0.0 | 50.0 | 0.0 | 0.0 |"
    assert lines[3] == f"| {run} | 0.0 | 50.0 | 100.0 | 25.0 |"


def test_a_slice_keeps_the_hops_and_kind_asked_for_and_names_them_in_its_type(tmp_path, dev, capsys):
    used = questions(tmp_path / "used.jsonl", [("n3", "hops-3", ["Ann Lee"])])
    out = tmp_path / "slice.jsonl"
    assert main(["slice", "--questions", str(dev), "--hops", "3", "4", "--kind", "1-3 names", "--kind", "count",
                 "--out", str(out)]) == 0
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(q["id"], q["metadata"]["type"]) for q in kept] == [("c3", "hops-3, count"), ("n3", "hops-3, 1-3 names")]
    assert kept[1]["golden_answers"] == ["Ann Lee"] and kept[1]["metadata"]["all_answers_required"]
    with pytest.raises(SystemExit, match="exists"):  # a user's file is never overwritten
        main(["slice", "--questions", str(dev), "--out", str(out)])
    assert main(["slice", "--questions", str(dev), "--hops", "3", "--exclude", str(used),
                 "--out", str(tmp_path / "rest.jsonl")]) == 0
    assert [json.loads(line)["id"] for line in (tmp_path / "rest.jsonl").read_text().splitlines()] == ["c3"]
    assert main(["table", "--questions", str(dev), "--floor-from", str(used), str(tmp_path)]) == 2
    assert "no count questions" in capsys.readouterr().err
