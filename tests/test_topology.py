import pytest
from hypothesis import given, settings, strategies as st

from ragteam.nodes.topology import FormatViolation, Parallel, Topology, normalize, parse_topology

VALID = {
    "RA,AG": "RA,AG",
    "QR,RA,DS,AG": "QR,RA,DS,AG",
    "R,DS,AG": "RA,DS,AG",
    "r -> ds -> ag": "RA,DS,AG",
    "QDS": "QDS",
    " qdp ": "QDP",
    "AG": "AG",
    "[RA|QR,RA],DS,AG": "[RA|QR,RA],DS,AG",
    "[QR,RA|RA]→AG": "[QR,RA|RA],AG",
}


@pytest.mark.parametrize("text,canonical", VALID.items())
def test_valid_forms_normalize_and_round_trip(text, canonical):
    topology = parse_topology(text)
    assert isinstance(topology, Topology)
    assert str(topology) == canonical
    assert parse_topology(str(topology)) == topology  # the canonical form parses to the same AST


def test_ast_shape_of_a_parallel_workflow():
    topology = parse_topology("[RA|QR,RA],DS,AG")
    assert topology.steps == (Parallel((("RA",), ("QR", "RA"))), "DS", "AG")
    assert topology.roles() == ["RA", "QR", "RA", "DS", "AG"]
    assert topology.decomposition is None
    assert parse_topology("QDS").decomposition == "QDS"


@pytest.mark.parametrize("text,reason", [
    ("", "empty workflow"),
    ("QDS,AG", "QDS must stand alone"),
    ("QR,QDP", "QDP must stand alone"),
    ("DS,AG", "DS needs RA before it"),
    ("QR,DS,RA,AG", "DS needs RA before it"),
    ("RA,DS", "must end with AG"),
    ("AG,RA,AG", "AG may appear only once"),
    ("RA,RA,AG", "RA appears twice"),
    ("QR,RA,QR,AG", "QR appears twice"),
    ("RA,XY,AG", "unknown role 'XY'"),
    ("[RA],AG", "at least two branches"),
    ("[RA|RA],AG", "branches must differ"),
    ("[RA | R],AG", "branches must differ"),  # identical once the alias is resolved
    ("[RA|QR],AG", "must retrieve"),
    ("[RA,DS|RA],AG", "cannot run inside a parallel group"),
    ("RA,[QR,RA|RA],AG", "appears twice on one path"),
    ("[RA|QR,RA,AG", "must close with ]"),
    ("RA,,AG", "unknown role ','"),
    ("RA,AG,", "ends unexpectedly"),
    ("__import__('os').system('x')", "unexpected character"),
])
def test_invalid_forms_are_reported_with_a_reason(text, reason):
    result = parse_topology(text)
    assert isinstance(result, FormatViolation)
    assert not result
    assert reason in result.reason


def test_decomposition_can_be_forbidden_at_depth():
    assert isinstance(parse_topology("QDS", allow_decomposition=False), FormatViolation)
    assert isinstance(parse_topology("RA,AG", allow_decomposition=False), Topology)


def test_normalize_is_the_cache_key():
    assert normalize("r , ag") == normalize("RA->AG") == "RA,AG"
    assert normalize("RA") is None


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=40))
def test_arbitrary_text_never_raises(text):
    result = parse_topology(text)
    assert isinstance(result, (Topology, FormatViolation))


TOKENS = st.sampled_from(["QR", "RA", "R", "DS", "AG", "QDS", "QDP", ",", "|", "[", "]", "->", " "])


@settings(max_examples=400, deadline=None)
@given(st.lists(TOKENS, max_size=12).map("".join))
def test_near_miss_grammar_is_valid_iff_its_canonical_form_reparses(text):
    result = parse_topology(text)
    if isinstance(result, Topology):
        assert parse_topology(str(result)) == result
    else:
        assert result.reason
