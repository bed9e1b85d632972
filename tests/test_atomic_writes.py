"""Every whole-file writer replaces its file through one exclusive temporary file: a user's
``NAME.tmp`` beside it survives, and a planted ``NAME.tmp`` link is never written through."""

import json
import os

import pytest

from ragteam.stores.jsonl import write_records
from ragteam.stores.owned import write_text
from ragteam.trainers.learner.checkpoint import write_json

WRITERS = {"write_text": lambda path: write_text(path, "new\n"),
           "write_records": lambda path: write_records(path, [{"a": 1}]),
           "write_json": lambda path: write_json(path, {"a": 1})}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_users_tmp_file_and_a_planted_link_are_left_alone(writer, tmp_path):
    target = tmp_path / "cfg.json"
    mine = tmp_path / "cfg.json.tmp"
    mine.write_text("the user's own\n")
    WRITERS[writer](target)
    assert mine.read_text() == "the user's own\n" and target.exists()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    mine.unlink()
    mine.symlink_to(victim)
    WRITERS[writer](target)
    assert victim.read_text() == "keep\n" and mine.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.json", "cfg.json.tmp", "victim.txt"]  # no leftovers
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def test_the_checkpoint_pointer_is_replaced_the_same_way(tmp_path):
    from ragteam.trainers.learner.checkpoint import latest_checkpoint, save_checkpoint
    from tests.test_first_hour import FakeOptimizer

    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    (tmp_path / "latest.tmp").symlink_to(victim)
    save_checkpoint(tmp_path, 1, FakeOptimizer(), {"cursor": 1}, keep=2)
    assert victim.read_text() == "keep\n" and latest_checkpoint(tmp_path) == tmp_path / "step-000001"
    assert json.loads((tmp_path / "step-000001" / "trainer.json").read_text())["step"] == 1


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_planted_lock_link_is_refused_and_its_target_left_alone(tmp_path):
    from ragteam.stores.folder_lock import exclusive

    target = tmp_path / "users.txt"
    target.write_text("mine\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".lock").symlink_to(target)
    with pytest.raises(ValueError, match="symlink"):
        with exclusive(tmp_path / "out", "evaluation"):
            pass
    assert target.read_text() == "mine\n"


def test_a_figure_replaces_a_link_at_its_name_instead_of_writing_through_it(tmp_path):
    """savefig(path) reopens the path: a link swapped in after the folder was checked would be
    written through. save_figure renders to memory and replaces the name itself."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ragteam.stores.atomic import save_figure

    target = tmp_path / "users.txt"
    target.write_text("mine\n")
    (tmp_path / "f1_vs_cost.png").symlink_to(target)
    figure = plt.figure()
    save_figure(figure, tmp_path / "f1_vs_cost.png", dpi=50)
    plt.close(figure)
    assert target.read_text() == "mine\n"
    assert not (tmp_path / "f1_vs_cost.png").is_symlink()
    assert (tmp_path / "f1_vs_cost.png").read_bytes().startswith(b"\x89PNG")


def test_appending_records_never_follows_a_link_swapped_in_at_the_name(tmp_path):
    from ragteam.stores.jsonl import append_records, read_records

    target = tmp_path / "users.txt"
    target.write_text("mine\n")
    append_records(tmp_path / "calls.jsonl", [{"a": 1}])
    (tmp_path / "calls.jsonl").unlink()
    (tmp_path / "calls.jsonl").symlink_to(target)  # swapped in after the checks
    with pytest.raises(ValueError, match="symlink"):
        append_records(tmp_path / "calls.jsonl", [{"a": 2}])
    assert target.read_text() == "mine\n"
    (tmp_path / "calls.jsonl").unlink()
    append_records(tmp_path / "calls.jsonl", [{"a": 3}])
    append_records(tmp_path / "calls.jsonl", [{"a": 4}])
    assert read_records(tmp_path / "calls.jsonl") == [{"a": 3}, {"a": 4}]
