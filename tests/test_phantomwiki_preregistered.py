"""The pre-registered PhantomWiki run's own pieces (examples/research/phantomwiki/): question
types read from the wording alone, the dev subset fixed before the run, and its committed
adapters: exported in bf16 under an offline base spec, then evaluated with the documented
command, ``ragteam eval --graph jade --policy adapters:DIR`` and as each fixed workflow
(``ragteam headroom``), on a tiny world."""

import json
import sys
from pathlib import Path

import pytest

from ragteam.graphs.apps.cli import main

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "research" / "phantomwiki"))

from phantomwiki_preregistered import export_bf16, first_per_hop_count  # noqa: E402
from phantomwiki_wording_types import wording_hops, wording_type  # noqa: E402


@pytest.mark.parametrize("question, hops, kind", [
    ("Who is the sibling of Tamara Moten?", 1, "names"),
    ("How many siblings does Tamara Moten have?", 1, "count"),
    ("Who is the person whose date of birth is 0185-08-28?", 1, "names"),
    ("What is the date of birth of the person whose date of birth is 0275-04-10?", 2, "names"),
    ("How many brothers does the sibling of Tamara Moten have?", 2, "count"),
    ("Who is the sister of the brother of the friend of the person whose hobby is microscopy?", 4, "names"),
    # a value with "of" in it is not a link
    ("Who is the child of the friend of the person whose occupation is chief of staff?", 3, "names"),
    ("How many brothers does the daughter of the mother of the person whose date of birth is 0185-08-28 have?",
     4, "count"),
])
def test_the_type_a_planner_can_see_comes_from_the_wording(question, hops, kind):
    assert wording_hops(question) == hops
    assert wording_type(question) == f"hops-{hops}, {kind}"


def test_the_dev_subset_is_the_first_questions_of_each_hop_count_in_file_order(tmp_path):
    source, target = tmp_path / "dev.jsonl", tmp_path / "subset.jsonl"
    rows = [{"id": f"q{i}", "question": "?", "golden_answers": ["x"], "metadata": {"hops": hops}}
            for i, hops in enumerate([1, 2, 1, 3, 2, 1, 2, 3])]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first_per_hop_count(source, target, 2)
    assert [json.loads(line)["id"] for line in target.read_text().splitlines()] == ["q0", "q1", "q2", "q3", "q4", "q7"]


def test_the_offline_spec_as_an_exports_base_model_is_the_offline_models_folder(tmp_path):
    from ragteam.nodes.policies.offline_model import ensure_offline_model
    from ragteam.nodes.policies.role_adapters import RoleMap, TeamExport

    team = TeamExport(tmp_path, "offline", RoleMap({"reader": ["AG"]}))
    assert Path(team.base_dir) == Path(ensure_offline_model())
    assert Path(team.tokenizer_dir) == Path(ensure_offline_model())  # no tokenizer folder in the export


@pytest.mark.slow
def test_committed_adapters_evaluate_with_the_documented_commands_on_a_tiny_world(tiny_model_dir, tmp_path):
    import torch
    from safetensors.torch import load_file

    from benchmarks.bench_role_adapters import random_team_export
    from tests.test_phantomwiki import phantom_folder

    team = {"planner": ["planner"], "decomposer": ["QDS"], "reader": ["AG", "AS"]}
    trained = random_team_export(tiny_model_dir, tmp_path / "run" / "adapters", team, rank=4)
    export = tmp_path / "committed"
    export_bf16(trained, export, base_model=tiny_model_dir)
    with pytest.raises(SystemExit, match="exists"):  # never over what is there
        export_bf16(trained, export, base_model=tiny_model_dir)
    assert sorted(p.name for p in export.iterdir()) == ["decomposer", "planner", "reader", "roles.json"]
    for name in team:
        weights = load_file(export / name / "adapter_model.safetensors")
        original = load_file(trained / name / "adapter_model.safetensors")
        assert weights.keys() == original.keys() and {w.dtype for w in weights.values()} == {torch.bfloat16}
        assert all(torch.equal(weights[k], original[k].to(torch.bfloat16)) for k in weights)
    assert json.loads((export / "roles.json").read_text())["adapters"] == team

    world, index = phantom_folder(tmp_path), tmp_path / "index"
    assert main(["index", "--kind", "bm25", "--corpus", str(world), "--out", str(index)]) == 0
    common = ["--policy", f"adapters:{export}", "--data", str(world), "--index", str(index), "--top-k", "2",
              "--limit", "2", "--quiet"]
    assert main(["eval", "--graph", "jade", *common, "--out", str(tmp_path / "team")]) == 0
    fixed = ["--workflow", "RA,AG", "--workflow", "QDS"]
    assert main(["headroom", *fixed, *common, "--out", str(tmp_path / "fixed")]) == 0
    records = [json.loads(line) for line in (tmp_path / "team" / "jade" / "predictions.jsonl").open()]
    assert sorted(r["id"] for r in records) == ["p1", "p2"]
    calls = [json.loads(line) for r in records for line in (tmp_path / "team" / r["trace_path"]).open()]
    played = {(c["role"], c["adapter"]) for c in calls}
    assert ("planner", "planner") in played and ("AG", "reader") in played  # each role under its own
    for folder in ("wf-RA-AG", "wf-QDS"):
        assert len((tmp_path / "fixed" / "top2" / folder / "predictions.jsonl").read_text().splitlines()) == 2


def test_the_workflow_by_hops_table_counts_root_plans_and_sub_question_plans(tmp_path, capsys):
    from phantomwiki_workflow_by_hops import main as by_hops

    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": q, "metadata": {"hops": h}}) + "\n"
                                 for q, h in (("a", 1), ("b", 1), ("c", 3))))
    run = tmp_path / "jade"
    run.mkdir()
    run.joinpath("predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"id": "a", "f1": 1.0, "topologies": ["RA,AG"]},
        {"id": "b", "f1": 0.0, "topologies": ["QDS", "RA,AG", "RA,AG"]},
        {"id": "c", "f1": 0.5, "topologies": ["QDS", "QR,RA,DS,AG"]},
        {"id": "elsewhere", "f1": 0.0, "topologies": ["QDS"]})))  # not among the questions: left out
    assert by_hops(["--questions", str(questions), "--run", f"team={run}", "--figure", str(tmp_path / "f.png")]) == 0
    printed = capsys.readouterr().out
    assert "| team | 1 | 2 | 50% | 50.0 | RA,AG 2 |" in printed
    assert "| team | 3 | 1 | 100% | 50.0 | QR,RA,DS,AG 1 |" in printed
    assert (tmp_path / "f.png").stat().st_size > 0
    with pytest.raises(SystemExit):  # never over an existing figure
        by_hops(["--questions", str(questions), "--run", f"team={run}", "--figure", str(tmp_path / "f.png")])


def test_the_ppo_stage_config_starts_each_adapter_from_the_committed_export(monkeypatch):
    """jade_phantomwiki_preregistered_ppo.yaml loads as a trainer config from the checkout: each
    adapter's init is a committed folder (checked as a peft adapter, rank 8 read from it) and
    only the planner trains."""
    from ragteam.trainers.config import load_config

    monkeypatch.chdir(ROOT)
    config = load_config(ROOT / "examples" / "research" / "phantomwiki" / "jade_phantomwiki_preregistered_ppo.yaml", {})
    assert {name: a.init for name, a in config.adapters.items()} == {
        name: f"docs/results/phantomwiki/adapters/{name}" for name in ("planner", "decomposer", "reader")}
    assert {a.lora_options()["r"] for a in config.adapters.values()} == {8}
    assert config.train_roles == ["planner"] and config.ppo.written_replies == "sampled"
