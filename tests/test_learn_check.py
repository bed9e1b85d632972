"""The learning gate (trainers/learn_check.py): its world has the known answer it claims, its
rule-based executors are competent, and the gate fails when nothing is learned."""

import random

import pytest

from ragteam.graphs.methods import build_graph
from ragteam.graphs.run import run
from ragteam.graphs.eval.metrics import score
from ragteam.nodes.context import RunContext, Settings
from ragteam.nodes.policies.spec import check_policy_spec, load_policy
from ragteam.nodes.team import Team
from ragteam.nodes.written import WrittenReplies
from ragteam.stores.datasets import read_dataset
from ragteam.stores.index import build_index, open_index
from ragteam.stores.routing_world import make_world, relation_chain, write_world


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("routing-world")
    built = make_world(seed=7, per_hops=8)
    questions, corpus = write_world(built, folder)
    build_index([corpus], "bm25", folder / "index")
    return built, read_dataset(questions).examples, open_index(folder / "index")


def test_names_share_no_word_and_two_seeds_share_no_name(world):
    built, _, _ = world
    words = [w for person in built.people for w in person.split()]
    assert len(words) == len(set(words))
    other = make_world(seed=8, per_hops=8)
    assert not set(built.people) & set(other.people)
    assert make_world(seed=7, per_hops=8).questions == built.questions  # seeded


def test_one_retrieval_reaches_the_first_hop_and_not_the_second(world):
    """The named person's article is in the top 5 for every question; the article the second
    hop needs (the first link's answer) for almost none: one retrieval cannot climb the chain."""
    built, examples, retriever = world
    first, second, multi = 0, 0, 0
    for example in examples:
        relations, person = relation_chain(example.question)
        titles = {d.title for d in retriever.search(example.question, k=5)}
        first += person in titles
        if len(relations) > 1:
            multi += 1
            second += built.parents[person][relations[-1]] in titles
    assert first == len(examples)
    assert second <= 0.1 * multi


@pytest.mark.parametrize("workflow, by_hops", [("AG", {1: 0.0, 2: 0.0, 3: 0.0}),
                                               ("RA,AG", {1: 1.0, 2: 0.0, 3: 0.0}),
                                               ("QDS", {1: 1.0, 2: 1.0, 3: 1.0})])
def test_the_rule_based_executors_leave_the_planner_a_known_answer(world, workflow, by_hops):
    """``ragteam headroom``'s view: one retrieval answers one hop only, decomposition every hop
    (at a higher cost on one hop: more rounds and retrievals)."""
    _, examples, retriever = world
    ctx = RunContext(Team(load_policy("rules:routing-world")), retriever, Settings(written=WrittenReplies.fixed(workflow, "RA,AG")))
    graph = build_graph("jade")
    f1, retrievals = {}, {}
    for example in examples:
        result = run(graph, example.question, ctx.for_new_run())
        hops = int(example.metadata["type"].split("-")[1])
        f1.setdefault(hops, []).append(score(result.answer, example.golds)["f1"])
        retrievals.setdefault(hops, []).append(result.costs["retrieval_calls"])
    assert {h: sum(v) / len(v) for h, v in f1.items()} == by_hops
    if workflow == "QDS":  # a one-hop question decomposed costs two retrievals
        assert set(retrievals[1]) == {2}


def test_the_rule_team_is_a_policy_spec():
    check_policy_spec("rules:routing-world")
    with pytest.raises(ValueError, match="no rule-based team 'nope'; known: rules:routing-world"):
        check_policy_spec("rules:nope")


# -- the gate can fail ---------------------------------------------------------------------------
def _shuffled_across_groups(trajectories, settings):
    """Sabotage: GRPO's standings, then dealt to runs of other questions at random."""
    from ragteam.trainers.algorithms.advantages import ADVANTAGE_ESTIMATORS

    ADVANTAGE_ESTIMATORS["grpo"](trajectories, settings)
    runs = list(trajectories)
    standings = [trajectories[r][0].advantage for r in runs]
    random.Random(0).shuffle(standings)
    for run_id, standing in zip(runs, standings):
        for e in trajectories[run_id]:
            e.advantage = e.returns = standing


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.parametrize("sabotage", ["learning rate 0", "advantages shuffled across groups"])
def test_the_gate_fails_when_nothing_is_learned(sabotage):
    from ragteam.trainers.algorithms.advantages import register_advantage
    from ragteam.trainers.learn_check import GateSettings, report, run_gate

    register_advantage("test_shuffled_across_groups")(_shuffled_across_groups)
    # learning rate 0: one step shows it as well as three (nothing moves however many)
    settings = (GateSettings(lr=0.0, steps=1) if sabotage == "learning rate 0" else
                GateSettings(ppo={**GateSettings().ppo, "advantage": "test_shuffled_across_groups"}))
    result = run_gate(settings)
    print(report(result))
    assert not result.passed
