"""Parsers under hostile model output: linear work, bounded input, bounded numbers, no exceptions,
plus a fuzz test over every role's parser and the topology language."""

import importlib
import pkgutil
import timeit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ragteam.nodes.roles
from ragteam.nodes.parsing import (MAX_PARSE_CHARS, fan_out_references, list_items, numbered_tags, numbers,
                                   resolve_references, strip_markup,
                           tag_content)
from ragteam.nodes.roles.apex import ExecutionObservation
from ragteam.nodes.roles.base import Observation, Role
from ragteam.nodes.roles.jade import DS, QDP, QDS
from ragteam.nodes.roles.m_ask import M_ASK_UPDATE, KnowledgeObservation
from ragteam.nodes.roles.search_loop import LoopObservation, parse_segment
from ragteam.nodes.topology import MAX_WORKFLOW_CHARS, Parallel, Topology, check_rules, parse_topology
from ragteam.nodes.tracing import Transition, read_jsonl, write_jsonl
from ragteam.stores.documents import Document


def growth(function, unit: str, small: int = 250, factor: int = 8) -> float:
    """How much longer ``function`` takes on ``factor``× the input: ~factor when linear,
    ~factor² when quadratic. Best of several repeats, so scheduling noise does not count."""
    def best(n):
        text = unit * n
        return min(timeit.repeat(lambda: function(text), number=3, repeat=7))
    return best(small * factor) / best(small)


ADVERSARIAL = {  # parser → a repeated unit that made the old versions quadratic or crash
    "tag_content": (lambda t: tag_content(t, "answer"), "<answer>"),
    "numbered_tags": (lambda t: numbered_tags(t, "q"), "<q1>"),
    "strip_markup": (strip_markup, "<a"),
    "numbers": (numbers, "12345678 "),
    "resolve_references": (lambda t: resolve_references(t, lambda n: None), "#1#"),
    "fan_out_references": (lambda t: fan_out_references(t, lambda n: None, 5), "#1#"),
    "list_items": (list_items, "a, and;"),
    "search_segment": (lambda t: parse_segment(3)(t, LoopObservation("q")), "<search><query>"),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_every_parser_does_linear_work(name):
    function, unit = ADVERSARIAL[name]
    assert growth(function, unit) < 24  # linear ≈ 8, quadratic ≈ 64


def test_the_sweeps_slow_inputs_are_cheap_now():
    # 128 KB of open tags once took 18 s; parsers now read at most MAX_PARSE_CHARS of it
    assert tag_content("<answer>" * 16000, "answer").startswith("<answer>")
    assert len(tag_content("<answer>" + "x" * 100_000, "answer")) <= MAX_PARSE_CHARS
    long_workflow = "[QR," + "RA," * 16000 + "RA|RA],AG"  # once 3.8 s in the validator
    assert "longer than" in parse_topology(long_workflow).reason


def test_topology_rules_check_linearly():
    # a long branch that repeats RA: once ``branch.count`` per role (quadratic)
    def long_branch(text):
        return check_rules(Topology((Parallel((("QR",) * len(text), ("RA",))), "AG")))
    assert growth(long_branch, "x", small=500) < 24


def test_workflow_length_is_capped_with_a_clear_violation():
    violation = parse_topology("RA," * (MAX_WORKFLOW_CHARS // 3 + 1) + "AG")
    assert not violation and f"longer than {MAX_WORKFLOW_CHARS}" in violation.reason


DIGITS = "9" * 5000  # past Python's 4,300-digit int() limit


def test_huge_digit_runs_are_violations_not_crashes():
    docs = tuple(Document(str(i), "t", "x") for i in range(3))
    parsed = DS.parse(f"<id>{DIGITS}</id>", Observation("q", documents=docs))
    assert not parsed.ok and parsed.action == [0, 1, 2]
    assert numbered_tags(f"<q{DIGITS}>x</q{DIGITS}>") == []
    update = M_ASK_UPDATE.parse(f"<Update>t{DIGITS}</Update>",
                                KnowledgeObservation("q", trajectory=(("a", "b"),)))
    assert not update.ok and update.action == {"op": "add"}
    assert resolve_references(f"Where is #{DIGITS}?", lambda n: "X") == f"Where is #{DIGITS}?"
    assert resolve_references("Where is #1?", lambda n: "X") == "Where is X?"


def test_a_list_answer_splits_into_its_names_and_a_reference_to_it_fans_out():
    assert list_items("Bo Dee, Cy Fox and Di Ray;\nBo Dee") == ["Bo Dee", "Cy Fox", "Di Ray"]
    assert list_items("") == [] and list_items(" , and ") == [] and list_items("Ann Lee") == ["Ann Lee"]
    answers = {1: "Ann Lee", 2: "Bo Dee, Cy Fox, Di Ray"}.get
    assert fan_out_references("Is #1 the sister of #2?", answers, 2) == [
        "Is Ann Lee the sister of Bo Dee?", "Is Ann Lee the sister of Cy Fox?"]  # #1 names one: resolved whole
    assert fan_out_references("Who is the friend of #1?", answers, 5) == []   # one name: nothing to fan out
    assert fan_out_references("Who is the friend of #3?", answers, 5) == []   # no answer yet


def test_a_decomposition_naming_an_answer_it_cannot_have_is_a_violation():
    def split(*subquestions: str) -> str:
        return "\n".join(f"<q{i}>{q}</q{i}>" for i, q in enumerate(subquestions, 1))
    chain = split("Who directed Jaws?", "Who is the wife of #1?", "Who is the brother of #2?")
    assert QDS.parse(chain, Observation(query="q")).action == [
        "Who directed Jaws?", "Who is the wife of #1?", "Who is the brother of #2?"]
    # a forward reference: the third one keeps the two before it
    parsed = QDS.parse(split("Who directed Jaws?", "Who is the wife of #1?", "Who is the brother of #3?"),
                       Observation(query="q"))
    assert not parsed.ok and parsed.reason == "sub-question 3 refers to #3, which is not an earlier sub-question"
    assert parsed.action == ["Who directed Jaws?", "Who is the wife of #1?"]
    # too early to keep two: nothing usable, the runtime solves the question directly
    parsed = QDS.parse(split("Who directed Jaws?", "Who is the wife of #2?", "Who is #0?"), Observation(query="q"))
    assert (parsed.ok, parsed.action) == (False, [])
    assert QDS.parse(split("Who is #1?", "Who is #1?"), Observation(query="q")).action == []
    # parallel sub-questions are answered together: any reference is unresolvable
    parsed = QDP.parse(split("Where is the Louvre?", "Where is the Prado?", "Is #1 in #2?"), Observation(query="q"))
    assert parsed.reason == "sub-question 3 refers to #1, but parallel sub-questions are answered together"
    assert parsed.action == ["Where is the Louvre?", "Where is the Prado?"]
    # over the limit and a bad reference: both reasons, the cut list checked
    parsed = QDS.parse(split("A?", "B of #1?", "C of #2?", "D of #9?"), Observation(query="q", max_items=3))
    assert parsed.reason == "4 sub-questions exceed the limit of 3"
    assert parsed.action == ["A?", "B of #1?", "C of #2?"]
    parsed = QDS.parse(split("A?", "B of #1?", "C of #5?", "D?"), Observation(query="q", max_items=3))
    assert parsed.reason == ("4 sub-questions exceed the limit of 3; "
                             "sub-question 3 refers to #5, which is not an earlier sub-question")
    assert parsed.action == ["A?", "B of #1?"]


def test_lone_surrogates_survive_the_trace_file(tmp_path):
    call = Transition(run_id="r", turn=1, step=0, role="AG", node_path="0/AG", task_id="0",
                      observation="q", prompt_text="p\ud800", completion_text="<answer>\udfff</answer>",
                      prompt_ids=[1], completion_ids=[2], logprobs=[-0.1], action="\udfff",
                      format_ok=True, violation="", policy="chat", trained=False, prompt_tokens=1,
                      completion_tokens=1, latency_s=0.0)
    path = tmp_path / "t.jsonl"
    write_jsonl([call], path)
    assert read_jsonl(path) == [call]


# -- fuzz: every role's parser and the topology language, long inputs included ------------------
OBSERVATIONS = {
    "jade": Observation("q", documents=tuple(Document(str(i), "t", "x") for i in range(3)),
                        known=(("a", "b"),)),
    "m_ask": KnowledgeObservation("q", trajectory=(("a", "b"), ("c", "d")), predicted="p"),
    "apex": ExecutionObservation("q", tried=("old",)),
    "search_loop": LoopObservation("q"),
}


def roles_by_module():
    for info in pkgutil.iter_modules(ragteam.nodes.roles.__path__):
        module = importlib.import_module(f"ragteam.nodes.roles.{info.name}")
        for value in vars(module).values():
            if isinstance(value, Role) and info.name in OBSERVATIONS:
                yield value, OBSERVATIONS[info.name]


ROLES = list(roles_by_module())
PIECES = st.sampled_from(["<answer>", "</answer>", "<q1>", "</q1>", "<q99999999>", "<id>", "</id>",
                          "<Update>", "</Update>", "<Add>", "t2", "<search>", "</search>", "<query>",
                          "<end>", "<workflow>", "</workflow>", "<evidence>", "<decision>",
                          "<predicted_answer>", "#1", "#" + DIGITS, DIGITS, "RA,AG", "QDS", "[RA|QR,RA]",
                          "\ud800", "\x1b[31m", " ", "x"])
TEXTS = st.one_of(st.text(max_size=300), st.lists(PIECES, max_size=40).map("".join),
                  st.tuples(PIECES, st.integers(1, 4000)).map(lambda p: p[0] * p[1]))


def test_every_module_of_roles_is_fuzzed():
    assert {role.name for role, _ in ROLES} == set(ragteam.nodes.roles.all_roles())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(ROLES))), TEXTS)
def test_no_parser_raises_on_any_text(index, text):
    role, observation = ROLES[index]
    parsed = role.parse(text, observation)
    assert parsed.ok or parsed.reason


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_the_topology_language_never_raises(text):
    result = parse_topology(text)
    assert isinstance(result, Topology) or result.reason
