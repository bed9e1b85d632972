"""The examples a newcomer copies from must keep working."""

import json
import re
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
    done = subprocess.run([sys.executable, "examples/quickstart.py", "2"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert not done.stderr.strip(), done.stderr[-2000:]  # no banners, bars or warnings before the answers
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith(" #  question"))
    rows = lines[header + 1:header + 3]  # one line a question: answer, gold, F1, workflow, calls
    assert [row[:4] for row in rows] == [" 1  ", " 2  "] and all(re.search(r" \d+\.\d  .* +\d+$", r) for r in rows)
    assert "Trace of question 1" in out and "#1 planner" in out
    table = [m.group(1) for line in lines if (m := re.fullmatch(r"(vanilla RAG|JADE) +\d+\.\d +\d+\.\d +\d+\.\d", line))]
    assert table == ["vanilla RAG", "JADE"]  # mean F1, calls and format violations a question
    assert "The model is untrained: SmolLM2-135M" in out and "20.1 F1 untrained to 29.8" in out
    assert "model calls written to runs/quickstart.jsonl" in out
    steps = lines[next(i for i, line in enumerate(lines) if line.startswith("Next")) + 1:]
    assert [step.split(":")[0].strip() for step in steps] == ["your own graph", "Studio", "training"]
    assert "ragteam run --graph examples/verified_rag.py:graph" in steps[0]
    assert "ragteam studio examples/verified_rag.py:graph && langgraph dev --config langgraph.ragteam.json" in steps[1]
    assert steps[2].endswith("python trainers/ppo_graph.py --steps 2")


@pytest.mark.slow  # ~18 subprocesses: evals, SFT rounds, a DeepSpeed PPO stage, compares (≈2.5 min)
def test_the_learning_recipe_runs_every_stage_and_reports(tmp_path, tiny_model_dir):
    """examples/learning_recipe.py end to end at toy size: a scripted team is sampled, a tiny model is
    fine-tuned on its traces and evaluated; the report, comparisons and pictures are written."""
    import yaml

    questions = (ROOT / "stores" / "data" / "hotpotqa_dev53_questions.jsonl").read_text().splitlines()
    (tmp_path / "train.jsonl").write_text("\n".join(questions[:3]) + "\n")
    (tmp_path / "dev.jsonl").write_text("\n".join(questions[-2:]) + "\n")
    config = {"graph": "jade", "train_data": str(tmp_path / "train.jsonl"),
              "eval_data": str(tmp_path / "dev.jsonl"),
              "corpus": str(ROOT / "stores" / "data" / "hotpotqa_dev53_corpus.jsonl"),
              # the held-out questions' own corpus, as PhantomWiki's worlds have (the same file here)
              "eval_corpus": str(ROOT / "stores" / "data" / "hotpotqa_dev53_corpus.jsonl"),
              "index_kind": "bm25", "baselines": ["vanilla_rag"], "sampler": "hf", "concurrency": 2,
              "policy": "scripted", "model": tiny_model_dir,
              "top_k": 2, "fan_out": 2, "fixed_workflows": ["RA,AG"],
              "rounds": [{"questions": 3, "samples": 2, "temperature": 0.7, "min_f1": 0.0, "epochs": 1, "lr": 1e-4,
                          "relabel_fallback": "RA,AG", "optimizer": "deepspeed", "held_out": True,
                          "hindsight_decompositions": "type"},
                         {"questions": 2, "offset": 0, "temperature": 0.7, "min_f1": 0.0, "epochs": 1, "lr": 1e-4,
                          "explore": ["RA,AG", "QDS"], "hindsight_answers": "only",
                          # the fixed workflows alone: the planner learns on their written plans' prompts
                          "explore_team": False,
                          "planner_targets": "type", "lora_r": 4,  # the default optimizer
                          "decomposition_targets": str(tmp_path / "chains.jsonl")}],
              "ppo": {"steps": 1, "questions_per_step": 1, "samples_per_question": 1, "forced_workflows": ["RA,AG"],
                      "temperature": 0.7, "concurrency": 2, "ppo": {"advantage": "grpo"}}}
    first = json.loads(questions[0])
    (tmp_path / "chains.jsonl").write_text(json.dumps({"id": first["id"], "question": first["question"],
                                                       "sub_questions": ["Who?", "What of #1?"]}) + "\n")
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    printed = run_example("examples/learning_recipe.py", "--config", str(tmp_path / "recipe.yaml"), "--out", str(out))
    report = (out / "report.md").read_text()
    assert report in printed
    for row in ("| vanilla_rag (untrained) | 2 |", "| jade (untrained) | 2 |", "| jade (warm start) | 2 |",
                "| jade (trained) | 2 |"):
        assert row in report
    # trained JADE vs untrained JADE, vs vanilla RAG, vs its own weights as RA,AG, and vs the warm start
    assert report.count("paired over 2 questions") == 4
    assert "| jade (planner) | 2 |" in report and "| RA,AG | 2 |" in report  # the fixed-workflow table
    assert "| round 2: best workflow (learned) |" in report  # the topology mix by question type
    # round 1's weights on the held-out questions, as the team and as each fixed workflow
    assert "| after | jade | RA,AG |" in report and "| held-out, after round 1 |" in report
    assert {p.name for p in (out / "round1" / "held_out" / "top2").iterdir() if p.is_dir()} == {"jade", "wf-RA-AG"}
    assert "| PPO steps 1-1: the team's own choice |" in report
    explored = out / "round2" / "explore" / "top2"
    # with given chains, QDS also runs writing them (the first question has one)
    assert {p.name for p in explored.iterdir() if p.is_dir()} == {"wf-RA-AG", "wf-QDS", "wf-QDS-given"}
    assert '"given-decompositions/questions_taught": 1' in printed
    assert (out / "round2" / "sft" / "hf" / "config.json").exists()
    assert all(" --top-k 2 --fan-out 2 " in line for line in printed.splitlines() if line.startswith("$ ") and
               any(f" {c} " in line for c in ("eval", "headroom", "trainers/ppo_graph.py")))
    sampled = (out / "round1" / "samples" / "jade" / "predictions.jsonl").read_text().splitlines()
    assert len(sampled) == 6  # 3 questions × 2 samples, each its own run
    assert (out / "round1" / "sft" / "hf" / "config.json").exists()
    fine_tunes = [line for line in printed.splitlines() if line.startswith("$ ") and "sft_graph.py" in line]
    assert [line.split("--optimizer ")[1].split()[0] for line in fine_tunes] == ["deepspeed", "torch"]
    assert [" --select hindsight-answers-only " in line for line in fine_tunes] == [False, True]
    assert [line.endswith(" --lora-r 4") for line in fine_tunes] == [False, True]  # merged into round2/sft/hf
    assert [f" --select planner-by-type={out / 'round2' / 'questions.jsonl'} " in line for line in fine_tunes] \
        == [False, True]
    assert [f" --select hindsight-decompositions={out / 'round1' / 'questions.jsonl'} " in line
            for line in fine_tunes] == [True, False]
    assert [f" --select given-decompositions={tmp_path / 'chains.jsonl'} " in line for line in fine_tunes] == [False, True]
    assert all(" --selectors " in line for line in fine_tunes)  # the study's decomposer selectors, both rounds
    assert '"planner-by-type/calls/planner": 2' in printed  # by type, every question of round 2 asks for a workflow
    ppo = [json.loads(line) for line in (out / "ppo" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in ppo] == [1] and ppo[0]["trained_transitions"] > 0
    assert "forced/RA,AG/f1" in ppo[0]  # the group: the team's own run and one written as RA,AG
    assert (out / "ppo" / "hf" / "config.json").exists()
    # every stage command's wall time, for a run resumed over sittings (compares are not stages)
    timed = [json.loads(line)["stage"] for line in (out / "stage_times.jsonl").read_text().splitlines()]
    assert timed == ["index", "index_eval", "eval_before", "round1/samples", "round1/sft", "round1/held_out",
                     "round2/explore", "round2/sft", "eval_after", "ppo", "eval_after_ppo", "eval_after_ppo_fixed"]
    assert "| round2/explore | " in report and "### Wall time per stage" in report
    for picture in ("learning_curve.png", "topology_mix.png", "topology_by_type.png"):
        assert (out / picture).stat().st_size > 0
    # frozen roles stay on the initial policy once the team is a trained one
    evals = [line for line in printed.splitlines() if line.startswith("$ ") and " eval " in line]
    assert [("--frozen-policy scripted" in line) for line in evals] == [False, False, True, True]
    held_out = [line for line in printed.splitlines() if line.startswith("$ ") and "dev.jsonl" in line]
    assert held_out and all(f"--index {out / 'index_eval'} " in line for line in held_out)
    assert all(f"--index {out / 'index'} " in line for line in printed.splitlines()
               if line.startswith("$ ") and any(f" {c} " in line for c in ("eval", "headroom", "trainers/ppo_graph.py"))
               and ("train.jsonl" in line or "questions.jsonl" in line))
    # a rerun finds every stage done and loads no model
    again = run_example("examples/learning_recipe.py", "--config", str(tmp_path / "recipe.yaml"), "--out", str(out))
    assert [line for line in again.splitlines() if line.startswith("$ ")] == \
        [line for line in printed.splitlines() if line.startswith("$ ") and " compare " in line]


def test_the_recipe_refuses_ppo_after_a_warm_start_when_roles_are_frozen(tmp_path):
    """The trainer's frozen copy is the model it starts from: after a planner-only warm start that
    would be the fine-tuned weights, not the executors' initial ones."""
    import yaml

    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump({
        "graph": "mao_arag", "sampler": "hf", "ppo": {"steps": 1}, "eval_data": "x.jsonl",
        "corpus": "y.jsonl", "train_data": "z.jsonl"}))
    done = subprocess.run([sys.executable, "examples/learning_recipe.py", "--config", str(tmp_path / "recipe.yaml"),
                           "--out", str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "mao_arag freezes QR, QDS, QDP, DS, AG, AS" in done.stderr


@pytest.mark.slow  # a chain of scripts (or a dense index built twice): tens of seconds
def test_a_failed_recipe_stage_is_one_line_and_a_rerun_resumes(tmp_path):
    """A stage whose command fails (here: no run clears min_f1, so the fine-tune has nothing to
    learn from) ends the recipe with one line naming the command, exit 1, no traceback."""
    data = ROOT / "stores" / "data"
    questions = (data / "hotpotqa_dev53_questions.jsonl").read_text().splitlines()
    (tmp_path / "train.jsonl").write_text("\n".join(questions[:2]) + "\n")
    (tmp_path / "dev.jsonl").write_text("\n".join(questions[-1:]) + "\n")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(json.dumps({
        "graph": "jade", "train_data": str(tmp_path / "train.jsonl"), "eval_data": str(tmp_path / "dev.jsonl"),
        "corpus": str(data / "hotpotqa_dev53_corpus.jsonl"), "policy": "scripted", "top_k": 2,
        "rounds": [{"questions": 2, "temperature": 0.7, "min_f1": 1.0, "epochs": 1, "lr": 1e-4,
                    "explore": ["RA,AG"]}]}))
    done = subprocess.run([sys.executable, "examples/learning_recipe.py", "--config", str(recipe), "--out",
                           str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("learning_recipe: a stage failed (exit 2): ") and "sft_graph.py" in last


def test_each_stage_command_leaves_its_wall_time_and_the_report_sums_a_stage_over_sittings(tmp_path, monkeypatch):
    """A stage's time is appended when its command finishes or fails (the recipe then stops),
    and a stage resumed in a later sitting adds up over its invocations."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    import learning_recipe
    import recipe_report

    outcomes = iter(["ok", "ok", "fail"])

    def command(*args):
        if next(outcomes) == "fail":
            raise learning_recipe.StageFailed("a stage failed (exit 1)")

    monkeypatch.setattr(learning_recipe, "sh", command)
    out = tmp_path / "run"
    out.mkdir()
    recipe = learning_recipe.Recipe({}, "r.yaml", out, "jade", "jade", "offline", "offline", "offline")
    recipe.run(out / "eval_before", "eval")
    recipe.run(out / "round1" / "explore", "headroom")
    with pytest.raises(learning_recipe.StageFailed):
        recipe.run(out / "round1" / "sft", "sft_graph.py")
    lines = [json.loads(line) for line in (out / "stage_times.jsonl").read_text().splitlines()]
    assert [(line["stage"], line["ended"]) for line in lines] == [
        ("eval_before", "finished"), ("round1/explore", "finished"), ("round1/sft", "failed")]

    (tmp_path / "resumed").mkdir()
    (tmp_path / "resumed" / "stage_times.jsonl").write_text("".join(json.dumps(line) + "\n" for line in [
        {"stage": "round1/explore", "ended": "stopped", "seconds": 5400.0, "at": "2026-11-28T23:00:00"},
        {"stage": "round1/explore", "ended": "finished", "seconds": 1800.0, "at": "2026-11-29T01:00:00"},
        {"stage": "round1/sft", "ended": "finished", "seconds": 2766.0, "at": "2026-11-29T02:00:00"}]))
    stages = recipe_report.stage_times(tmp_path / "resumed")
    assert stages == {"round1/explore": {"minutes": 120.0, "invocations": 2, "ended": "finished"},
                      "round1/sft": {"minutes": 46.1, "invocations": 1, "ended": "finished"}}
    table = recipe_report.stage_times_table(stages)
    assert "| round1/explore | 120.0 | 2 |" in table and "| all | 166.1 | |" in table


def test_a_stopped_recipe_records_the_stopped_stage(tmp_path):
    """SIGTERM (a sitting's end, a scheduler) stops the running stage's command and still leaves
    its time so far, marked stopped; the recipe exits 128 + SIGTERM."""
    import signal

    script = tmp_path / "stage.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'examples')!r})\n"
        "from pathlib import Path\n"
        "import learning_recipe as lr\n"
        f"out = Path({str(tmp_path / 'run')!r}); out.mkdir()\n"
        "from ragteam.nodes.shutdown import exit_on_sigterm\n"
        "exit_on_sigterm()\n"
        "recipe = lr.Recipe({}, 'r.yaml', out, 'jade', 'jade', 'offline', 'offline', 'offline')\n"
        "recipe.run(out / 'round2' / 'explore', sys.executable, '-c', 'import time; time.sleep(120)')\n")
    process = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().startswith("$ ")  # the stage's command has started
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    [line] = [json.loads(line) for line in (tmp_path / "run" / "stage_times.jsonl").read_text().splitlines()]
    assert line["stage"] == "round2/explore" and line["ended"] == "stopped" and line["seconds"] < 60


def test_shuffled_rounds_slice_every_question_type(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    from learning_recipe import write_slice

    source = tmp_path / "grouped.jsonl"
    source.write_text("".join(json.dumps({"id": f"{t}{i}", "question": f"q {t}{i}?", "golden_answers": ["a"],
                                          "metadata": {"type": t}}) + "\n" for t in "abcd" for i in range(25)))
    write_slice(source, 0, 20, 1, tmp_path / "file_order.jsonl")
    write_slice(source, 0, 20, 1, tmp_path / "shuffled.jsonl", shuffle_seed=0)
    types = lambda name: {json.loads(line)["metadata"]["type"] for line in (tmp_path / name).open()}  # noqa: E731
    assert types("file_order.jsonl") == {"a"} and types("shuffled.jsonl") == set("abcd")
    again = tmp_path / "again.jsonl"
    write_slice(source, 0, 20, 1, again, shuffle_seed=0)  # one seeded order: a rerun slices the same
    assert again.read_text() == (tmp_path / "shuffled.jsonl").read_text()


# for trainers/ppo_graph.py; tests/test_trainer.py and tests/test_phantomwiki_preregistered.py load them
TRAINER_CONFIGS = {"jade_ppo.yaml", "jade_phantomwiki_preregistered_ppo.yaml"}


@pytest.mark.parametrize("name", sorted(str(p.relative_to(ROOT / "examples")) for p in (ROOT / "examples").rglob("*.yaml")
                                        if p.name not in TRAINER_CONFIGS))
def test_every_shipped_recipe_is_a_valid_recipe(name, monkeypatch):
    """Checked as the recipe checks it before its first stage, less the data files (not in CI):
    a shipped variant whose option was renamed or mistyped fails here, not hours into a run."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    from recipe_config import RecipeConfig, recipe_values

    config = RecipeConfig.model_validate(recipe_values(ROOT / "examples" / name))
    assert config.rounds or config.ppo, f"{name}: neither a warm start nor PPO"


@pytest.mark.parametrize("adapters, export, policy", [
    (None, "hf", "hf:{stage}/hf"),
    ({"planner": {"roles": ["planner"]}, "executors": {"roles": ["QDS", "DS", "AG", "AS"]}},
     "adapters", "adapters:{stage}/adapters"),
])
def test_the_recipe_serves_what_its_ppo_stage_exported(adapters, export, policy, tmp_path, monkeypatch):
    """After PPO the team is the run's export: one model (hf/), or with per-role adapters a peft
    folder each (adapters/), which only ``--policy adapters:DIR`` serves. A finished export is
    not trained again."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    import learning_recipe

    commands = []

    def trainer(*args):  # what ppo_graph.py leaves behind when its run ends
        commands.append(args)
        (stage / export).mkdir(parents=True)
        (stage / "metrics.jsonl").write_text(json.dumps({"step": 1, "f1": 0.5}) + "\n")

    monkeypatch.setattr(learning_recipe, "sh", trainer)
    out, stage = tmp_path / "run", tmp_path / "run" / "ppo"
    out.mkdir()
    config = {"graph": "jade", "sampler": "hf", "seed": 0, "train_data": "train.jsonl"}
    recipe = learning_recipe.Recipe(config, "r.yaml", out, "jade", "jade", "offline", "offline", "offline")
    ppo = {"steps": 1, **({"adapters": adapters} if adapters else {})}
    assert learning_recipe.ppo_stage(recipe, ppo) == [{"step": 1, "f1": 0.5}]
    assert recipe.policy == policy.format(stage=stage) and recipe.model == str(stage / export)
    assert learning_recipe.ppo_stage(recipe, ppo) and len(commands) == 1  # rerun: already exported


def test_a_round_with_adapters_trains_them_and_the_team_serves_them(tmp_path, monkeypatch):
    """A round's ``adapters:`` become ``sft_graph.py --adapter NAME=ROLES``; the team is then the
    untouched model serving that export (``--policy adapters:DIR``), and a finished export is not
    fine-tuned again."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    import learning_recipe

    commands = []

    def run(*args):  # what each command leaves behind
        commands.append(args)
        if "eval" in args:  # the round's samples of the team
            folder = Path(args[args.index("--out") + 1]) / "jade"
            folder.mkdir(parents=True)
            (folder / "predictions.jsonl").write_text(
                json.dumps({"id": "q1", "f1": 0.5, "topologies": ["RA,AG"]}) + "\n")
        else:  # the fine-tune
            (out / "round1" / "sft" / "adapters").mkdir(parents=True)
            (out / "round1" / "sft" / "metrics.jsonl").write_text(json.dumps({"epoch": 1, "nll": 0.2}) + "\n")

    monkeypatch.setattr(learning_recipe, "sh", run)
    train = tmp_path / "train.jsonl"
    train.write_text(json.dumps({"id": "q1", "question": "Who?", "golden_answers": ["a"]}) + "\n")
    out = tmp_path / "run"
    out.mkdir()
    config = {"graph": "jade", "sampler": "hf", "seed": 0, "train_data": str(train), "eval_data": "dev.jsonl",
              "concurrency": 1}
    recipe = learning_recipe.Recipe(config, "r.yaml", out, "jade", "jade", "offline", "offline", "base")
    options = {"questions": 1, "temperature": 0.7, "min_f1": 0.3, "epochs": 1, "lr": 1e-4,
               "optimizer": "torch", "lora_r": 8, "adapters": {"planner": ["planner"], "executors": ["QDS", "AG"]}}
    assert learning_recipe.warm_start_round(recipe, 1, options, 0)["kept_runs"] == 1
    fine_tune = " ".join(commands[-1])
    assert "--lora-r 8 --adapter planner=planner --adapter executors=QDS,AG" in fine_tune
    assert recipe.policy == f"adapters:{out / 'round1' / 'sft' / 'adapters'}" and recipe.model == "base"
    learning_recipe.warm_start_round(recipe, 1, options, 0)
    assert len(commands) == 2  # the rerun: samples and export found, nothing run again


def test_planner_preferences_score_each_workflow_reply_as_a_full_forward_pass_does(tmp_path, tiny_model_dir, capsys):
    """examples/planner_preferences.py on a hand-made evaluation: two questions whose first plan
    was recorded and one whose trace has none (a fixed workflow's run, skipped). Each workflow's
    score equals the reply's log-probability from one forward pass over prompt + reply; the shares
    sum to one; the table counts tops by question type; an existing --out is refused."""
    import importlib.util

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragteam.trainers.weight_sync import completion_logprobs

    spec = importlib.util.spec_from_file_location("prefs", ROOT / "examples" / "planner_preferences.py")
    prefs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prefs)

    run = tmp_path / "eval" / "jade"
    (run / "traces").mkdir(parents=True)
    plans = {"a": [5, 17, 301, 9], "b": [40, 2, 77]}
    predictions = []
    for qid, calls in (("a", [("planner", "0", plans["a"]), ("planner", "0.1", [1, 2])]),
                       ("b", [("QR", "0", [3]), ("planner", "0", plans["b"])]),
                       ("c", [("AG", "0", [8, 9])])):
        trace = run / "traces" / f"{qid}.jsonl"
        trace.write_text("".join(json.dumps({"role": role, "task_id": task, "prompt_ids": ids}) + "\n"
                                 for role, task, ids in calls))
        predictions.append({"id": qid, "trace_path": f"jade/traces/{qid}.jsonl"})
    (run / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in predictions))
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": q, "question": "?", "golden_answers": ["x"],
                                        "metadata": {"type": t}}) + "\n"
                            for q, t in (("a", "hops-1"), ("b", "hops-3"), ("c", "hops-3"))))

    out = tmp_path / "prefs.jsonl"
    assert prefs.main(["--run", str(run), "--policy", f"hf:{tiny_model_dir}", "--data", str(data),
                       "--workflow", "RA,AG", "--workflow", "QDS", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["type"]) for r in rows] == [("a", "hops-1"), ("b", "hops-3")]
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)

    class Reply:  # what completion_logprobs reads of a Generation
        def __init__(self, prompt_ids, text):
            self.prompt_ids, self.completion_ids = prompt_ids, tokenizer.encode(text, add_special_tokens=False)

    for row in rows:
        for workflow in ("RA,AG", "QDS"):
            full = completion_logprobs(lm, Reply(plans[row["id"]], f"<workflow>{workflow}</workflow>")).sum()
            assert row["logprob"][workflow] == pytest.approx(full.item(), abs=1e-4)
        assert sum(row["share"].values()) == pytest.approx(1.0)
        assert row["top"] == max(row["logprob"], key=row["logprob"].get)
    table = capsys.readouterr().out.splitlines()
    assert table[-2].startswith("| hops-1 | 1 | ") and table[-1].startswith("| hops-3 | 1 | ")
    with pytest.raises(SystemExit):
        prefs.main(["--run", str(run), "--policy", f"hf:{tiny_model_dir}", "--out", str(out)])
