"""Offline models named as policy specs: ``offline`` (SmolLM2-135M) and ``offline:NAME``, whose GGUF
may be split across several packages and is joined once, checked against its sha256."""

import hashlib
import sys

import pytest

from ragteam.nodes.policies.offline_model import (DEFAULT, QWEN_READER, OfflineModel, gguf_location,
                                          offline_model)
from ragteam.nodes.policies.spec import check_policy_spec


def test_specs_name_the_packaged_models():
    assert offline_model("offline") is DEFAULT
    assert offline_model("offline:qwen2.5-coder-0.5b") is QWEN_READER
    with pytest.raises(ValueError, match="known: offline, offline:smollm2-135m, offline:qwen2.5-coder-0.5b"):
        offline_model("offline:gpt-9")
    with pytest.raises(ValueError, match="unknown offline model"):
        check_policy_spec("offline:gpt-9")


@pytest.fixture
def split_model(tmp_path, monkeypatch):
    """A GGUF 'split' across two importable packages of a fake model."""
    pieces = [b"GGUF" + bytes(range(200)), bytes(reversed(range(256))) * 3]
    for n, piece in enumerate(pieces, 1):
        package = tmp_path / "site" / f"fake_part{n}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"part{n}.bin").write_bytes(piece)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for n in (1, 2):
        sys.modules.pop(f"fake_part{n}", None)
    digest = hashlib.sha256(b"".join(pieces)).hexdigest()
    model = OfflineModel("fake", (("fake_part1", "data/part1.bin"), ("fake_part2", "data/part2.bin")),
                         "fake-f32", "pip install fake", sha256=digest)
    return model, b"".join(pieces)


def test_a_split_gguf_is_joined_once_in_order_and_verified(split_model, tmp_path):
    model, whole = split_model
    path = gguf_location(model, tmp_path / "cache")
    assert path.read_bytes() == whole and path.parent == tmp_path / "cache"
    assert gguf_location(model, tmp_path / "cache") == path  # joined once
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["fake-f32.gguf"]


def test_a_join_that_does_not_match_its_sha256_is_refused_and_not_kept(split_model, tmp_path):
    model, _ = split_model
    wrong = OfflineModel(model.name, model.parts, model.converted, model.install, sha256="0" * 64)
    with pytest.raises(RuntimeError, match="not the published"):
        gguf_location(wrong, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_missing_part_says_how_to_install_it(tmp_path):
    model = OfflineModel("absent", (("no_such_package_xyz", "x.bin"),), "absent-f32", "make setup-reader",
                         sha256="0" * 64)
    with pytest.raises(RuntimeError, match="make setup-reader"):
        gguf_location(model, tmp_path)
