"""PhantomWiki as a dataset: its readers (converted JSONL and the generator's output folder), the
set metric its answers are scored by, list answers from the answer roles, and a headroom run."""

import json
from pathlib import Path

import pytest

from ragteam.graphs.apps.cli import main
from ragteam.graphs.eval.metrics import answer_items, score
from ragteam.graphs.methods.jade import JadeReward
from ragteam.graphs.run import RunResult
from ragteam.nodes.roles.base import Observation
from ragteam.nodes.roles.jade import AG, AS, SEVERAL_ANSWERS, parse_answer
from ragteam.nodes.tracing import Transition
from ragteam.stores.corpus import CorpusError, read_corpus
from ragteam.stores.datasets import DatasetError, QAExample, read_dataset

ROOT = Path(__file__).resolve().parents[1]


def article(name: str, *sections: str) -> str:
    """An article as phantom-wiki writes one: a title heading, then its sections."""
    return f"# {name}\n\n" + "\n\n".join(sections) + "\n"


ARTICLES = [
    {"title": "Alice Smith", "facts": ["hobby('Alice Smith', 'archery')"],
     "article": article("Alice Smith", "## Friends\nThe friends of Alice Smith are Bob Jones, Carol White.",
                        "## Attributes\nThe hobby of Alice Smith is archery.")},
    {"title": "Bob Jones", "article": article("Bob Jones", "## Friends\nThe friends of Bob Jones are Alice Smith.",
                                              "## Attributes\nThe hobby of Bob Jones is archery.")},
    {"title": "Carol White",
     "article": article("Carol White", "## Family\nThe brother of Carol White is Dan White.",
                        "## Attributes\nThe hobby of Carol White is chess.")},
    {"title": "Dan White", "article": article("Dan White", "## Family\nThe sister of Dan White is Carol White.",
                                              "## Attributes\nThe occupation of Dan White is pharmacist.")},
]
QUESTIONS = [  # phantom-wiki's own question records (question format json)
    {"id": "p1", "question": "Who is the person whose hobby is archery?", "answer": ["Alice Smith", "Bob Jones"],
     "prolog": {"query": ["hobby(Y_1, 'archery')"], "answer": "Y_1"}, "template": ["Who is", "..."],
     "type": 6, "difficulty": 1},
    {"id": "p2", "question": "Who is the brother of the friend of Alice Smith?", "answer": ["Dan White"],
     "prolog": {"query": ["brother(Y_2, Y_3)", "friend('Alice Smith', Y_2)"], "answer": "Y_3"},
     "template": ["Who is", "..."], "type": 3, "difficulty": 2},
    {"id": "p3", "question": "How many friends does Alice Smith have?", "answer": [2],
     "prolog": {"query": ["aggregate_all(count, friend('Alice Smith', Y_2), Count_1)"], "answer": "Count_1"},
     "template": ["How many", "..."], "type": 17, "difficulty": 2},
]


def phantom_folder(tmp_path, questions=QUESTIONS, name="pw-out"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "articles.json").write_text(json.dumps(ARTICLES, indent=4))
    (folder / "questions.json").write_text(json.dumps(questions, indent=4))
    return folder


# -- reading -------------------------------------------------------------------------------------
def test_flashrag_records_that_need_every_answer_are_scored_as_sets(tmp_path):
    path = tmp_path / "pw.jsonl"
    path.write_text(
        json.dumps({"id": "a", "question": "Who is the friend of Ann?", "golden_answers": ["Bob", "Cy"],
                    "metadata": {"type": "hops-1", "hops": 1, "template": 3, "aggregation": False,
                                 "all_answers_required": True}}) + "\n"
        + json.dumps({"id": "b", "question": "Who wrote Dracula?", "golden_answers": ["Bram Stoker"],
                      "metadata": {"type": "bridge"}}) + "\n")
    a, b = read_dataset(path).examples
    assert (a.metric, a.golds, a.metadata["type"]) == ("set", ("Bob", "Cy"), "hops-1")
    assert (b.metric, b.golds) == ("max", ("Bram Stoker",))
    assert QAExample("c", "Q?", ("x",)).metric == "max"  # hand-made examples keep HotpotQA scoring


def test_a_phantom_wiki_output_folder_is_a_dataset_and_a_corpus(tmp_path):
    folder = phantom_folder(tmp_path)
    dataset = read_dataset(folder)
    assert dataset.name == "pw-out" and [e.id for e in dataset.examples] == ["p1", "p2", "p3"]
    p1, p2, p3 = dataset.examples
    assert p1.golds == ("Alice Smith", "Bob Jones") and {e.metric for e in dataset.examples} == {"set"}
    assert p1.metadata == {"type": "hops-1", "hops": 1, "template": 6, "aggregation": False,
                           "all_answers_required": True}
    assert (p2.metadata["type"], p2.metadata["hops"]) == ("hops-2", 2)
    # a count: one aggregate_all clause is one hop; the integer answer becomes a string
    assert (p3.metadata["type"], p3.metadata["aggregation"], p3.golds) == ("hops-1", True, ("2",))
    # questions.json given directly reads the same
    assert [e.metadata for e in read_dataset(folder / "questions.json").examples] == [
        e.metadata for e in dataset.examples]

    for corpus in (folder, folder / "articles.json"):
        documents = read_corpus(corpus)
        assert [(d.id, d.title) for d in documents] == [
            ("pw0", "Alice Smith"), ("pw1", "Bob Jones"), ("pw2", "Carol White"), ("pw3", "Dan White")]
        assert documents[3].text.startswith("# Dan White\n\n## Family\nThe sister of Dan White is Carol White.")


def test_questions_by_type_are_read_in_type_order(tmp_path):
    folder = tmp_path / "by-type"
    (folder / "questions").mkdir(parents=True)
    for n, question in ((10, QUESTIONS[2]), (2, QUESTIONS[0])):  # type10 must come after type2
        (folder / "questions" / f"type{n}.json").write_text(json.dumps([question]))
    assert [e.id for e in read_dataset(folder).examples] == ["p1", "p3"]


def test_phantom_wiki_errors_name_the_file_and_key(tmp_path):
    with pytest.raises(DatasetError, match=r"empty: a directory without questions\.json"):
        read_dataset((tmp_path / "empty").mkdir() or tmp_path / "empty")
    bad = phantom_folder(tmp_path, [{**QUESTIONS[0], "answer": "Alice Smith"}, QUESTIONS[1]], name="bad")
    with pytest.raises(DatasetError, match=r"questions\.json: record 0: PhantomWiki 'answer' must be a list"):
        read_dataset(bad)
    assert [e.id for e in read_dataset(bad, skip_bad=True).examples] == ["p2"]
    (bad / "articles.json").write_text(json.dumps([ARTICLES[0], {"title": "Bob Jones"}]))
    with pytest.raises(CorpusError, match=r"articles\.json: article 1: missing field\(s\) article"):
        read_corpus(bad)
    with pytest.raises(CorpusError, match="nor a phantom-wiki output folder with articles.json"):
        read_corpus(tmp_path / "empty")


# -- the set metric ------------------------------------------------------------------------------
GOLD = ["Alice Smith", "Bob Jones"]


def test_the_set_metric_on_hand_made_predictions():
    half = score("Alice Smith and Carol", GOLD, "set")  # predicted {alice smith, carol}: 1 of 2 right
    assert half == {"em": 0.0, "f1": 0.5, "precision": 0.5, "recall": 0.5, "acc": 0.0}
    one = score("Alice Smith", GOLD, "set")  # all it says is right, half of the set is missing
    assert (one["precision"], one["recall"], one["em"]) == (1.0, 0.5, 0.0)
    assert one["f1"] == pytest.approx(2 / 3)
    assert score("Alice Smith", GOLD)["f1"] == 1.0  # the default best-gold metric would call it right
    exact = score("bob jones; Alice Smith.", GOLD, "set")
    assert exact == {"em": 1.0, "f1": 1.0, "precision": 1.0, "recall": 1.0, "acc": 1.0}
    more = score("Alice Smith, Bob Jones, and Carol", GOLD, "set")  # Oxford comma: 3 items
    assert (more["em"], more["acc"], more["recall"]) == (0.0, 1.0, 1.0)
    assert more["precision"] == pytest.approx(2 / 3) and more["f1"] == pytest.approx(0.8)
    assert score("", GOLD, "set") == {"em": 0.0, "f1": 0.0, "precision": 0.0, "recall": 0.0, "acc": 0.0}
    assert score("Alice Smith\nAlice Smith", ["Alice Smith"], "set")["em"] == 1.0  # a set: repeats count once


def test_numbers_and_names_with_and_in_them():
    assert score("two", ["2"], "set")["em"] == 1.0
    assert score("Twenty-one", ["21"], "set")["em"] == 1.0
    assert score("2, three", ["2", "3"], "set")["f1"] == 1.0
    assert score("2", ["3"], "set")["f1"] == 0.0
    # an item that is itself a gold keeps its "and"; any other piece is split there
    assert answer_items("health and safety inspector, pharmacist and nurse",
                        ["health and safety inspector"]) == {"health and safety inspector", "pharmacist", "nurse"}
    with pytest.raises(ValueError, match="unknown answer metric 'mean'"):
        score("x", ["x"], "mean")


def test_the_training_reward_scores_a_set_question_as_a_set():
    example = QAExample("p1", "Who is the person whose hobby is archery?", tuple(GOLD), metric="set")
    transition = Transition(
        run_id="r", turn=1, step=0, role="AG", node_path="0/AG", task_id="0", observation="",
        prompt_text="", completion_text="x", prompt_ids=[1], completion_ids=[2], logprobs=[-0.5],
        action="Alice Smith", format_ok=True, violation="", policy="p", trained=True,
        prompt_tokens=1, completion_tokens=1, latency_s=0.0)
    result = RunResult(question=example.question, answer="Alice Smith", stop_reason="answered", rounds=[],
                       tasks=[], costs={"turns": 1, "retrieval_calls": 1}, transitions=[transition])
    outcome = JadeReward(alpha=0, beta=0)(result, example)
    assert outcome.scores["f1"] == pytest.approx(2 / 3) and outcome.rewards == [pytest.approx(2 / 3)]


# -- list answers ----------------------------------------------------------------------------------
def test_the_answer_roles_ask_for_every_answer_and_keep_the_list_whole():
    assert SEVERAL_ANSWERS in AG.instruction and SEVERAL_ANSWERS in AS.instruction
    observation = Observation(query="Who is the friend of Ann?")
    parsed = parse_answer("<answer>Alice Smith, Bob Jones and Carol White</answer>", observation)
    assert parsed.ok and parsed.action == "Alice Smith, Bob Jones and Carol White"
    assert answer_items(parsed.action) == {"alice smith", "bob jones", "carol white"}
    assert parse_answer("<answer>the Danube</answer>", observation).action == "the Danube"  # as before


# -- headroom ----------------------------------------------------------------------------------------
def test_a_scripted_headroom_run_on_a_phantom_wiki_folder(tmp_path, capsys):
    folder, index, out = phantom_folder(tmp_path), tmp_path / "index", tmp_path / "hr"
    assert main(["index", "--kind", "bm25", "--corpus", str(folder), "--out", str(index)]) == 0
    assert main(["headroom", "--policy", "scripted", "--data", str(folder), "--index", str(index),
                 "--workflow", "RA,AG", "--workflow", "QDS", "--top-k", "2", "--out", str(out),
                 "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "| candidate | n | F1 | F1 hops-1 | F1 hops-2 | LLM calls |" in printed
    assert "best per type (" in printed and "oracle (best per question) | 3 |" in printed
    # RA,AG gets p1 two-thirds right (one of its two archers) and the others wrong: 2/9 overall,
    # 1/3 on hops-1 (the best-gold metric would have called p1 right: 33.3 and 50.0)
    assert "| RA,AG | 3 | 22.2 | 33.3 | 0.0 |" in printed
    for candidate in ("wf-RA-AG", "wf-QDS"):
        records = [json.loads(line) for line in (out / "top2" / candidate / "predictions.jsonl").open()]
        assert sorted(r["id"] for r in records) == ["p1", "p2", "p3"]
        assert {r["metric"] for r in records} == {"set"}
        for r in records:
            assert {k: r[k] for k in ("em", "f1", "precision", "recall", "acc")} == score(
                r["prediction"], r["golds"], "set")
    # the scripted AG answers with the first document's title: an archer, one of the two
    archery = next(json.loads(line) for line in (out / "top2" / "wf-RA-AG" / "predictions.jsonl").open()
                   if json.loads(line)["id"] == "p1")
    assert archery["prediction"] in GOLD and archery["f1"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("name", ["jade_hotpotqa.yaml", "jade_hotpotqa_top1.yaml", "jade_phantomwiki.yaml"])
def test_the_example_recipes_are_checked_whole_and_valid(name, monkeypatch):
    """The recipes the docs point at load (their data under ../shared, each key checked);
    PhantomWiki's names each world's own corpus."""
    if not (ROOT.parent / "shared" / "data").is_dir():
        pytest.skip("the shared data folder (../shared/data) is not beside this checkout")
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    from recipe_config import load_recipe

    folder = ROOT / "examples" if name == "jade_hotpotqa.yaml" else ROOT / "examples" / "research" / "phantomwiki"
    config = load_recipe(folder / name, ROOT)
    assert (config.eval_corpus is not None) == (name == "jade_phantomwiki.yaml")


def test_answer_drift_counts_what_the_answer_calls_said_and_which_way_they_were_pushed(tmp_path, capsys):
    """examples/research/phantomwiki/phantomwiki_answer_drift.py on one hand-made step: a question run as QDS (an
    answer naming a person, its final answer a relation word) and twice as RA,AG (better and
    worse). Plain GRPO compares all three runs; by workflow, the two RA,AG runs with each other
    and the lone QDS run with itself (neither up nor down)."""
    import importlib.util

    script = ROOT / "examples" / "research" / "phantomwiki" / "phantomwiki_answer_drift.py"
    spec = importlib.util.spec_from_file_location("drift", script)
    drift = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(drift)

    def record(workflows, reward, *answers):
        calls = [{"role": "planner", "text": f"<workflow>{workflows[0]}</workflow>"}]
        calls += [{"role": role, "text": f"<answer>{text}</answer>"} for role, text in answers]
        return {"question_id": "q", "workflows": workflows, "reward": reward, "calls": calls}

    step = [record(["QDS", "RA,AG"], 0.1, ("AG", "Ann Lee"), ("AS", "mother")),
            record(["RA,AG"], 0.9, ("AG", "Ann Lee, Bo Dee")),
            record(["RA,AG"], 0.2, ("AG", "3"))]
    (tmp_path / "rollouts").mkdir()
    (tmp_path / "rollouts" / "step-000001.jsonl").write_text("\n".join(json.dumps(r) for r in step))
    # columns: answers, naming a person, relation words, pushed up, pushed down (mean 0.4)
    assert drift.main([str(tmp_path)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[2:4] == ["| 1 | QDS | 2 | 1 | 1 | 0 | 2 |", "| 1 | RA,AG | 2 | 1 | 0 | 1 | 1 |"]
    assert drift.main([str(tmp_path), "--by-workflow"]) == 0  # RA,AG runs: mean 0.55
    rows = capsys.readouterr().out.splitlines()
    assert rows[2:4] == ["| 1 | QDS | 2 | 1 | 1 | 0 | 0 |", "| 1 | RA,AG | 2 | 1 | 0 | 1 | 1 |"]
    assert drift.kind_of("friend of the friend of Ann") == "relation" and drift.kind_of("0244-10-07") == "other"


def test_the_decompositions_check_tells_a_restated_question_from_a_split_one(tmp_path, capsys):
    """examples/research/phantomwiki/phantomwiki_decompositions.py on one hand-made step: three runs opened by QDS (one
    restates the question as its first sub-question, two split it; the first QDS call of one is
    malformed, so its second counts) and one RA,AG run (no decomposition, left out)."""
    import importlib.util

    script = ROOT / "examples" / "research" / "phantomwiki" / "phantomwiki_decompositions.py"
    spec = importlib.util.spec_from_file_location("decompositions", script)
    decompositions = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(decompositions)

    question = "Who is the sister of the friend of Ann Lee?"

    def record(f1, *replies):
        calls = [{"role": "planner", "text": "<workflow>QDS</workflow>", "format_ok": True}]
        calls += [{"role": role, "text": text, "format_ok": ok} for role, text, ok in replies]
        return {"question": question, "f1": f1, "calls": calls}

    step = [record(0.2, ("QDS", "<q1>Who is the sister of the friend of Ann Lee?</q1><q2>Who is #1?</q2>", True)),
            record(0.5, ("QDS", "<q1>Who is the friend of Ann Lee?</q1><q2>Who is the sister of #1?</q2>", True)),
            record(1.0, ("QDS", "q1: who", False), ("QDS", "<q1>Who is Ann Lee's friend?</q1>", True)),
            record(0.9, ("AG", "<answer>Bo Dee</answer>", True))]
    (tmp_path / "rollouts").mkdir()
    (tmp_path / "rollouts" / "step-000003.jsonl").write_text("\n".join(json.dumps(r) for r in step))
    assert decompositions.main([str(tmp_path)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[2:] == ["| step 3 | 3 | 1 | 0.33 | 20.0 | 75.0 |", "| all steps | 3 | 1 | 0.33 | 20.0 | 75.0 |"]


def test_the_reach_bound_follows_each_chain_and_checks_every_hop_against_top_k(tmp_path, monkeypatch):
    """examples/research/phantomwiki/phantomwiki_reach.py on a hand-made world of six people: the chains reproduce the
    gold answers, and a retriever that returns the people a query names (in world order) reaches
    a hop only when all of its people fit in k."""
    import importlib.util
    import sys

    from ragteam.stores.documents import Document

    script = ROOT / "examples" / "research" / "phantomwiki" / "phantomwiki_reach.py"
    spec = importlib.util.spec_from_file_location("phantomwiki_reach", script)
    reach = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, reach)  # its dataclasses look their module up
    spec.loader.exec_module(reach)

    people = {"Ann Lee": ["The friends of Ann Lee are Bo Dee, Cy Fox.", "The hobby of Ann Lee is chess."],
              "Bo Dee": ["The sister of Bo Dee is Di Dee.", "The hobby of Bo Dee is chess."],
              "Cy Fox": ["The sisters of Cy Fox are Ed Fox, Flo Fox.", "The date of birth of Cy Fox is 0201-01-02."],
              "Di Dee": ["The occupation of Di Dee is nurse."],
              "Ed Fox": ["The occupation of Ed Fox is pilot."],
              "Flo Fox": ["The occupation of Flo Fox is pilot."]}
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"title": name, "text": article(name, "\n".join(lines))})
                                for name, lines in people.items()))
    world = reach.read_world(corpus)
    assert world["Cy Fox"].relations == {"sisters": ["Ed Fox", "Flo Fox"]}
    assert world["Cy Fox"].attributes == {"date of birth": "0201-01-02"}

    chain = reach.parse_question("What is the occupation of the sister of the friend of Ann Lee?")
    assert chain == reach.Chain("Ann Lee", ("friend", "sister"), ("attribute", "occupation"))
    assert [(h.sub_question, h.needs, h.answers) for h in reach.follow(world, chain)] == [
        ("Who is the friend of Ann Lee?", ["Ann Lee"], ["Bo Dee", "Cy Fox"]),
        ("Who is the sister of Bo Dee, Cy Fox?", ["Bo Dee", "Cy Fox"], ["Di Dee", "Ed Fox", "Flo Fox"]),
        ("What is the occupation of Di Dee, Ed Fox, Flo Fox?", ["Di Dee", "Ed Fox", "Flo Fox"], ["nurse", "pilot"])]
    assert reach.parse_question("Who is the person whose hobby is chess?") == \
        reach.Chain(("hobby", "chess"), (), ("who",))
    assert reach.parse_question("Where was Ann Lee born?") is None

    class NamedPeople:
        def search(self, query, k=5):
            return [Document(id=name, title=name, text="") for name in people if name in query][:k]

    records = [{"question": "What is the occupation of the sister of the friend of Ann Lee?",
                "golden_answers": ["nurse", "pilot"], "metadata": {"hops": 3}},
               {"question": "How many sisters does the friend of Ann Lee have?",
                "golden_answers": ["1", "2"], "metadata": {"hops": 2}},
               {"question": "Who is the person whose hobby is chess?",
                "golden_answers": ["Ann Lee", "Bo Dee"], "metadata": {"hops": 1}}]
    rows, agree = reach.measure(records, world, NamedPeople(), [2, 3])
    assert agree == 1.0
    # columns a k: one retrieval, perfect QDS, hops within k, one retrieval per name
    assert reach.table(rows, [2, 3]).splitlines()[2:] == [
        "| 1 | 1 | 2 | 1 | 0% | 0% | 100% | 0% | 0% | 0% | 100% | 0% |",  # a hop of two: nobody named
        "| 2 | 1 | 3 | 2 | 0% | 100% | 100% | 100% | 0% | 100% | 100% | 100% |",  # the question names Ann alone
        "| 3 | 1 | 6 | 3 | 0% | 0% | 0% | 100% | 0% | 100% | 100% | 100% |"]  # its last hop needs three: per name at 2
    assert reach.per_name_queries(chain, reach.follow(world, chain))[1:] == [
        [("Bo Dee", "Who is the sister of Bo Dee?"), ("Cy Fox", "Who is the sister of Cy Fox?")],
        [(n, f"What is the occupation of {n}?") for n in ("Di Dee", "Ed Fox", "Flo Fox")]]
    capped, _ = reach.measure(records, world, NamedPeople(), [3], fan_out=2)  # three sisters, two searched
    assert [capped[h][3]["per_name"] for h in (1, 2, 3)] == [0, 1, 0]

    # an eval split by whether one retrieval held the evidence (only "the friend of Ann Lee" names
    # everyone it needs), with its answers that list several
    asked = [{"id": "a", **records[0]}, {"id": "c", **records[2]},
             {"id": "d", "question": "Who is the friend of Ann Lee?", "golden_answers": ["Bo Dee", "Cy Fox"],
              "metadata": {"hops": 1}}]
    predictions = [{"id": "d", "f1": 1.0, "prediction": "Bo Dee, Cy Fox", "golds": ["Bo Dee", "Cy Fox"]},
                   {"id": "c", "f1": 0.0, "prediction": "Ann Lee", "golds": ["Ann Lee", "Bo Dee"]},
                   {"id": "a", "f1": 0.5, "prediction": "nurse", "golds": ["nurse", "pilot"]}]
    assert reach.reader_table(asked, world, NamedPeople(), 3, predictions).splitlines()[2:] == [
        "| 1 | 100.0 (1) | 0.0 (1) | 1 | 2 |", "| 3 | – | 50.0 (1) | 0 | 1 |"]

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"title": "Ann Lee", "text": "The hobby of Bo Dee is chess."}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: a fact about 'Bo Dee' in 'Ann Lee'"):
        reach.read_world(bad)


def test_the_perfect_decomposer_writes_each_chain_inside_out_and_its_candidates_are_paired(tmp_path, capsys,
                                                                                          monkeypatch):
    """examples/research/phantomwiki/phantomwiki_oracle_decomposer.py: the QDS reply it writes for a chain, a one-hop
    question kept whole, and a scripted run of its candidates (with --fan-out: five) on the tiny
    folder, each covering every question and compared in pairs."""
    import importlib.util
    import sys

    from ragteam.nodes.roles.jade import QDS

    script = ROOT / "examples" / "research" / "phantomwiki" / "phantomwiki_oracle_decomposer.py"
    spec = importlib.util.spec_from_file_location("phantomwiki_oracle_decomposer", script)
    oracle = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, oracle)
    monkeypatch.syspath_prepend(str(script.parent))
    spec.loader.exec_module(oracle)

    def reply(question):
        return oracle.perfect_decomposition(QDS.request(Observation(query=question, max_items=4)))

    assert reply("What is the occupation of the sister of the friend of Ann Lee?") == (
        "<q1>Who is the friend of Ann Lee?</q1>\n<q2>Who is the sister of #1?</q2>\n"
        "<q3>What is the occupation of #2?</q3>")
    assert reply("How many brothers does the friend of the person whose hobby is chess have?") == (
        "<q1>Who is the person whose hobby is chess?</q1>\n<q2>Who is the friend of #1?</q2>\n"
        "<q3>How many brothers does #2 have?</q3>")
    assert reply("Who is the friend of Ann Lee?") == "<q1>Who is the friend of Ann Lee?</q1>"
    plural = oracle.perfect_decomposition(QDS.request(Observation(
        query="How many brothers does the child of the person whose hobby is chess have?", max_items=4)), True)
    assert plural == ("<q1>Who are all the people whose hobby is chess?</q1>\n<q2>Who are all the children of "
                      "#1?</q2>\n<q3>How many brothers does #2 have?</q3>")

    folder, index, out = phantom_folder(tmp_path), tmp_path / "index", tmp_path / "oracle"
    assert main(["index", "--kind", "bm25", "--corpus", str(folder), "--out", str(index)]) == 0
    assert oracle.main(["--data", str(folder), "--index", str(index), "--policy", "scripted", "--sampler", "hf",
                        "--top-k", "2", "--concurrency", "2", "--fan-out", "2", "--out", str(out)]) == 0
    for candidate in ("wf-RA-AG", "wf-QDS", "wf-QDS-perfect", "wf-QDS-fan-out", "wf-QDS-perfect-fan-out"):
        records = [json.loads(line) for line in (out / candidate / "predictions.jsonl").open()]
        assert sorted(r["id"] for r in records) == ["p1", "p2", "p3"]
    two_hops = next(r for r in map(json.loads, (out / "wf-QDS-perfect" / "predictions.jsonl").open())
                    if r["id"] == "p2")
    calls = [json.loads(line) for line in (out / two_hops["trace_path"]).open()]
    [decomposition] = [c["completion_text"] for c in calls if c["role"] == "QDS"]
    assert decomposition == "<q1>Who is the friend of Alice Smith?</q1>\n<q2>Who is the brother of #1?</q2>"
    summary = (out / "summary.md").read_text()
    assert summary.count("paired over 3 questions") == 6 and "QDS, perfect decomposer, fan-out" in summary
    fanned = json.loads((out / "wf-QDS-perfect-fan-out" / "graph.json").read_text())
    assert fanned["fan_out"] == 2 and "fan_out" not in json.loads((out / "wf-QDS-perfect" / "graph.json").read_text())
    assert summary in capsys.readouterr().out


def test_the_decomposer_probe_asks_about_named_answers_only_a_few_per_hop_count(tmp_path):
    """examples/research/phantomwiki/phantomwiki_decomposer_probe.py picks the first N questions of each hop count whose
    answers are names (a count has no chain to write out), in hop order."""
    import importlib.util

    script = ROOT / "examples" / "research" / "phantomwiki" / "phantomwiki_decomposer_probe.py"
    spec = importlib.util.spec_from_file_location("phantomwiki_decomposer_probe", script)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    rows = [("a", "hops-2", ["Bo Dee"]), ("b", "hops-1", ["3"]), ("c", "hops-1", ["Cy Fox"]),
            ("d", "hops-2", ["Di Dee", "Ed Fox"]), ("e", "hops-2", ["Flo Fox"]), ("f", "hops-1", ["Al Bo"])]
    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps({"id": i, "question": f"Who is {i}?", "golden_answers": golds,
                                        "metadata": {"type": hops}}) + "\n" for i, hops, golds in rows))
    assert [e.id for e in probe.chosen_questions(str(data), 2)] == ["c", "f", "a", "d"]
