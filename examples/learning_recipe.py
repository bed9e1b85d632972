"""A documented learning run: a team (JADE by default) trained on HotpotQA, judged on 200 held-out
questions.

    python examples/learning_recipe.py [--config examples/jade_hotpotqa.yaml] [--out runs/learn_jade]

Stages (each one resumable: rerunning the command skips what is finished and continues the rest):
1. a BM25 (or hybrid) index over the corpus, shared by training and evaluation (with
   ``eval_corpus``, a second one over the held-out questions' own corpus: PhantomWiki's worlds);
2. ``ragteam eval`` of the untrained model: the baselines and the method on the held-out questions
   (greedy);
3. per warm-start round: ``ragteam eval`` samples the current team on that round's slice of the
   training questions (temperature > 0), then ``trainers/sft_graph.py`` fine-tunes the round's
   roles on the format-valid calls of the runs that scored at least ``min_f1`` — rejection
   sampling, the model learning from its own successes (expert iteration). With
   ``relabel_fallback``, a planner reply that broke its format in such a run is trained toward the
   workflow the runtime fell back to (the one that actually produced the good answer). With
   ``explore: [workflows]`` the round instead runs ``ragteam headroom``: every question by the
   team as itself and as each listed workflow (no planner), and the planner learns the workflow
   that scored best on that question (ties to the cheaper), the other roles every run that
   scored at least ``min_f1`` (``sft_graph.py --explore``); ``explore_team: false`` leaves the
   team itself out (its own choices are not needed when the planner learns per type). With
   ``held_out: true`` the round's weights then run on the held-out questions as the team and as
   each fixed workflow (greedy).
   ``decomposer_examples: [3, 4]`` also runs each serially decomposing workflow with its
   decomposer shown a 3- and a 4-step example chain (sampling other lengths), and
   ``hindsight_decompositions: true`` teaches the decomposer the decomposition whose run reached
   the most gold names (the PhantomWiki study's ``hindsight-decompositions`` selector,
   ``selector_flags``); ``type`` instead of ``true``, the best of the length that reached the
   most on the question's type; or ``decomposition_targets: FILE`` teaches it given chains
   instead (``given-decompositions``),
   an exploring round also running each decomposing workflow with them written for it.
   With ``adapters: {NAME: [roles]}`` (the last round only) the round trains a LoRA adapter per
   name instead of the shared weights, and the team serves them over the untouched model;
4. ``ragteam eval`` of the trained team on the held-out questions (greedy);
4b. with a ``ppo:`` section (``trainers/ppo_graph.py`` options, e.g. GRPO groups), joint PPO from
   the warm-started weights on the training questions, then the same evaluation of its model;
4c. with ``fixed_workflows``, the final weights (after PPO, or after the warm start without it)
   run as each of them (greedy, no planner): what choosing per question adds over the same weights;
5. ``ragteam compare`` (paired bootstrap over questions) of the trained team against its untrained
   self, each baseline, and its own weights as the first and as the best fixed workflow; a
   before/after table, the fixed-workflow table, the workflow chosen per question type at each
   stage, the learning curve and the topology mix over training (methods with a planner).

``--no-ppo`` stops after the warm start (and its fixed-workflow evaluation).

The config's ``graph:`` is a method name or your own graph (``path/to/file.py:NAME``). A method's
frozen roles (MAO-ARAG's executors, QAgent's generator) stay on the initial weights.

Writes OUT/report.md, OUT/learning_curve.png, OUT/topology_mix.png, OUT/topology_by_type.png and
OUT/report.json. Each stage command's wall time is appended to OUT/stage_times.jsonl as it ends
(or is stopped), so a run resumed over several sittings still reports what each stage cost.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import yaml

_CHECKOUT = Path(__file__).resolve().parents[1]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.graphs.eval.evaluate import unfinished_graphs
from ragteam.graphs.eval.headroom import oracle_picks, question_types, read_candidates
from ragteam.graphs.methods import get_method
from ragteam.nodes.shutdown import exit_on_sigterm
from recipe_config import load_recipe, ppo_train_config
from recipe_report import STAGE_TIMES, by_type, mean, records, root_workflow, topology_mix, write_report
from ragteam.stores.datasets import read_dataset
from ragteam.stores.jsonl import append_records, read_records, write_records
from ragteam.stores.owned import RECIPE, claim, own_file, write_text
from ragteam.trainers.algorithms.sft import planner_targets

ROOT = Path(__file__).resolve().parents[1]
PYTHON, RAGTEAM = sys.executable, str(Path(sys.executable).with_name("ragteam"))


class StageFailed(RuntimeError):
    """A stage's command exited with an error (its own output says why)."""


def sh(*args: str) -> None:
    print("$ " + " ".join(args), flush=True)
    if (code := subprocess.run(args, cwd=ROOT).returncode) != 0:
        raise StageFailed(f"a stage failed (exit {code}): {' '.join(args)[:400]}; its output is above. "
                          "Rerun the same command to resume from the finished stages.")


def write_slice(source: Path, start: int, count: int, samples: int, target: Path,
                shuffle_seed: int | None = None) -> None:
    """The training questions [start, start + count) as their own file, each ``samples`` times
    under its own id (``ID~k``: every sample is a separate run with its own trace). With
    ``shuffle_seed`` the slice is taken from the questions in one seeded order (a file grouped by
    question type, as PhantomWiki's is, would otherwise give a round a single type)."""
    examples = read_dataset(source).examples
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(examples)
    chosen = [{"id": e.id, "question": e.question, "golden_answers": list(e.golds), "metadata": e.metadata}
              for e in examples[start:start + count]]
    copies = [{**record, "id": f"{record['id']}~{k}"} if samples > 1 else record
              for record in chosen for k in range(samples)]
    write_records(target, copies)


@dataclass
class Recipe:
    """One learning run: its config, folder and index, and the team as it stands (``policy`` serves
    the roles, ``model`` is what the next stage fine-tunes)."""

    config: dict
    config_path: str
    out: Path
    reference: str   # what the commands get: a method name or your own path/to/file.py:NAME
    graph: str       # the method's name: folders, tables and plots are named after it
    initial: str     # the untrained team's policy
    policy: str
    model: str

    @property
    def index(self) -> Path:
        return self.out / "index"

    @property
    def eval_index(self) -> Path:
        """The held-out questions' index: their own corpus's when the recipe names one."""
        return self.out / "index_eval" if self.config.get("eval_corpus") else self.index

    @functools.cached_property
    def eval_types(self) -> dict[str, str]:
        """Each held-out question's type (PhantomWiki's ``hops-N``): the by-type tables' rows."""
        return question_types(read_dataset(ROOT / self.config["eval_data"]).examples)

    def index_for(self, data: str) -> Path:
        return self.eval_index if data == self.config["eval_data"] else self.index

    @property
    def seed(self) -> str:
        return str(self.config.get("seed", 0))

    @property
    def top_k(self) -> str:
        return str(self.config.get("top_k") or 5)  # Settings.top_k's default

    @property
    def fan_out(self) -> list[str]:
        """The option every eval, round and PPO step is run with (none when the recipe sets none)."""
        return ["--fan-out", str(self.config["fan_out"])] if self.config.get("fan_out") else []

    def run(self, stage: Path, *args: str) -> None:
        """``sh(*args)``, its wall time appended to OUT/stage_times.jsonl under ``stage`` (its
        output folder): also when it fails or is stopped, so a stage resumed in a later sitting
        has one line per invocation."""
        started, ended = time.perf_counter(), "stopped"
        try:
            sh(*args)
            ended = "finished"
        except StageFailed:
            ended = "failed"
            raise
        finally:
            append_records(own_file(self.out / STAGE_TIMES), [{
                "stage": stage.relative_to(self.out).as_posix(), "ended": ended,
                "seconds": round(time.perf_counter() - started, 1), "at": time.strftime("%Y-%m-%dT%H:%M:%S")}])

    def evaluate(self, graphs: str, folder: Path, data: str, temperature: float = 0.0,
                 run_seed: str | None = None) -> None:
        """``ragteam eval`` of the team as it stands (skipped once finished). A method's frozen
        roles (MAO-ARAG's executors, QAgent's generator) stay on the initial weights once the
        policy is a trained one; ragteam loads that copy only for such methods."""
        frozen = ["--frozen-policy", self.initial] if self.policy != self.initial else []
        names = [get_method(name).name for name in graphs.split(",")]
        if not unfinished_graphs(folder, names, read_dataset(ROOT / data).examples):
            return
        self.run(folder, RAGTEAM, "eval", "--graph", graphs, "--data", data, "--index", str(self.index_for(data)),
                 "--policy", self.policy, "--sampler", self.config["sampler"],
                 "--concurrency", str(self.config["concurrency"]), "--seed", run_seed or self.seed,
                 "--temperature", str(temperature), "--top-k", self.top_k, *self.fan_out, *frozen, "--out", str(folder))

    def headroom(self, folder: Path, data: str, workflows: list[str], temperature: float = 0.0,
                 run_seed: str | None = None, with_team: bool = False, example_steps: Sequence[int] = (),
                 given_decompositions: str | None = None) -> Path:
        """``ragteam headroom``: the team as each fixed workflow (and, ``with_team``, as itself
        with its planner; each serially decomposing one also with each of ``example_steps``, and
        with ``given_decompositions`` written as its decomposer's replies) on the same questions;
        skipped once finished. Its OUT/top<k> folder."""
        if not (folder / "headroom.md").exists():  # written when every candidate has finished
            team = ["--graph", self.reference] if with_team else []
            lengths = [a for n in example_steps for a in ("--decomposer-example-steps", str(n))]
            given = ["--given-decompositions", given_decompositions] if given_decompositions else []
            self.run(folder, RAGTEAM, "headroom", *[a for w in workflows for a in ("--workflow", w)], *team,
                     *lengths, *given, "--data", data, "--index", str(self.index_for(data)), "--policy", self.policy,
                     "--sampler", self.config["sampler"], "--concurrency", str(self.config["concurrency"]),
                     "--seed", run_seed or self.seed, "--temperature", str(temperature), "--top-k", self.top_k,
                     *self.fan_out, "--out", str(folder))
        return folder / f"top{self.top_k}"


def build_index(recipe: Recipe) -> None:
    """Stage 1: one index over the corpus, shared by training and evaluation, and one over the
    held-out questions' own corpus when the recipe names one (``eval_corpus``)."""
    for index, corpus in ((recipe.index, recipe.config["corpus"]),
                          (recipe.eval_index, recipe.config.get("eval_corpus"))):
        if corpus and not index.exists():
            recipe.run(index, RAGTEAM, "index", "--corpus", corpus, "--kind", recipe.config["index_kind"],
                       "--out", str(index))


# the PhantomWiki study's decomposer selectors (hindsight_decompositions, decomposition_targets)
STUDY_SELECTORS = ROOT / "examples" / "research" / "phantomwiki" / "phantomwiki_selectors.py"


def selector_flags(options: dict, questions: Path) -> list[str]:
    """The round's ``sft_graph.py --select`` flags (``trainers/algorithms/selectors.py``): which
    roles' calls its options choose by a rule of their own rather than by score."""
    chosen = []
    if options.get("hindsight_answers"):
        chosen.append("hindsight-answers-only" if options["hindsight_answers"] == "only" else "hindsight-answers")
    if options.get("planner_targets") == "type":
        chosen.append(f"planner-by-type={questions}")
    if options.get("hindsight_decompositions"):
        by_type = options["hindsight_decompositions"] == "type"
        chosen.append("hindsight-decompositions" + (f"={questions}" if by_type else ""))
    if options.get("decomposition_targets"):
        chosen.append(f"given-decompositions={ROOT / options['decomposition_targets']}")
    study = any(name.startswith(("hindsight-decompositions", "given-decompositions")) for name in chosen)
    return ["--selectors", str(STUDY_SELECTORS)] * study + [flag for name in chosen for flag in ("--select", name)]


def warm_start_round(recipe: Recipe, number: int, options: dict, start: int) -> dict:
    """Stage 3, one round: sample the team on the round's training questions, fine-tune the
    round's roles on the successful runs' calls; the team moves to the fine-tuned weights."""
    folder = recipe.out / f"round{number}"
    folder.mkdir(exist_ok=True)
    questions = folder / "questions.jsonl"
    write_slice(ROOT / recipe.config["train_data"], start, options["questions"], options.get("samples", 1),
                questions, int(recipe.seed) if recipe.config.get("shuffle_train") else None)
    targets = options.get("decomposition_targets")
    if options.get("explore"):  # the team as itself and as each workflow; the best one is learned
        # with given chains, also each decomposing workflow writing them: what the planner should
        # ask for once the decomposer has learned them
        explored = recipe.headroom(folder / "explore", str(questions), options["explore"],
                                   options["temperature"], str(number),
                                   with_team=options.get("explore_team", True),
                                   example_steps=options.get("decomposer_examples") or [],
                                   given_decompositions=str(ROOT / targets) if targets else None)
        selection = ["--explore", str(explored)]
    else:
        recipe.evaluate(recipe.reference, folder / "samples", str(questions), options["temperature"], str(number))
        selection = ["--traces", str(folder / "samples")]
        if options.get("relabel_fallback"):
            selection += ["--relabel-fallback", options["relabel_fallback"]]
    selection += selector_flags(options, questions)
    adapters = options.get("adapters") or {}
    # the export: the fine-tuned model (hf/), or a peft folder per adapter over the untouched model
    export = folder / "sft" / ("adapters" if adapters else "hf")
    if not export.is_dir():  # written whole when the fine-tune ends
        recipe.run(folder / "sft", PYTHON, "trainers/sft_graph.py", *selection,
                   "--roles", ",".join(options.get("roles", ["all"])), "--min-f1", str(options["min_f1"]),
                   "--model", recipe.model, "--out", str(folder / "sft"), "--epochs", str(options["epochs"]),
                   "--lr", str(options["lr"]), "--seed", recipe.seed, "--optimizer", options["optimizer"], "--resume",
                   *(["--lora-r", str(options["lora_r"])] if options.get("lora_r") else []),
                   *[a for name, roles in adapters.items() for a in ("--adapter", f"{name}={','.join(roles)}")])
    if adapters:
        recipe.policy = f"adapters:{export}"  # the model stays: the last round's (config-checked)
    else:
        recipe.model = str(export)
        recipe.policy = f"hf:{recipe.model}"  # served by the recipe's --sampler
    sft = read_records(folder / "sft" / "metrics.jsonl")
    held_out = held_out_stage(recipe, folder / "held_out") if options.get("held_out") else {}
    if not options.get("explore"):
        samples = records(folder / "samples" / recipe.graph)
        return {"questions": len(samples), "sample_f1": mean(samples, "f1"),
                "kept_runs": sum(r["f1"] >= options["min_f1"] for r in samples), "mix": topology_mix(samples),
                "sft": sft, "held_out": held_out}
    candidates = read_candidates(explored)
    runs = {c.label: {r["id"]: r for r in records(explored / c.folder)} for c in candidates}
    # without the team among the candidates (explore_team: false), the round's samples are the
    # fixed workflows' runs, and there is no choice of the team's own to tabulate
    own = runs.get(recipe.graph) or {f"{q}@{w}": r for w, rs in runs.items() for q, r in rs.items()}
    picks = oracle_picks(runs, every=False)
    types = question_types(read_dataset(questions).examples)
    targets = planner_targets(explored, candidates, runs, options["min_f1"],
                              types if options.get("planner_targets") == "type" else None)
    explored_questions = {q for rs in runs.values() for q in rs}
    return {"questions": len(explored_questions), "sample_f1": mean(list(own.values()), "f1"),
            "oracle_f1": mean([runs[w][q] for q, w in picks.items()], "f1"),
            "kept_runs": sum(runs[w][q]["f1"] >= options["min_f1"] for q, w in picks.items()),
            "mix": topology_mix(list(own.values())), "sft": sft, "held_out": held_out,
            "own_by_type": by_type({q: root_workflow(r) for q, r in runs.get(recipe.graph, {}).items()},
                                   types),
            "picks_by_type": by_type(targets, types)}  # what the planner learned


def held_out_stage(recipe: Recipe, folder: Path) -> dict:
    """A round's weights on the held-out questions (greedy), as the team and as each fixed
    workflow, paired: each candidate's mean F1 and the team's workflow by question type."""
    workflows = recipe.config.get("fixed_workflows") or []
    top = recipe.headroom(folder, recipe.config["eval_data"], workflows, with_team=True)
    runs = {c.label: records(top / c.folder) for c in read_candidates(top)}
    runs = {recipe.graph: runs.pop(recipe.graph), **runs}  # the team's column first
    return {"f1": {label: mean(rs, "f1") for label, rs in runs.items()},
            "own_by_type": by_type({r["id"]: root_workflow(r) for r in runs[recipe.graph]}, recipe.eval_types)}


def ppo_stage(recipe: Recipe, ppo: dict) -> list[dict]:
    """Stage 4b: joint PPO from the warm-started weights; the team moves to the result. Its
    per-step metrics."""
    stage, options = recipe.out / "ppo", recipe.out / "ppo_options.yaml"  # the trainer owns stage/
    write_text(own_file(options), yaml.safe_dump(ppo))
    # the export: one model (hf/), or with per-role adapters a peft folder each (adapters/)
    trained = ppo_train_config(ppo, recipe.config, out=str(stage))
    export = stage / trained.export_name
    if not export.is_dir():  # written whole when the run ends
        recipe.run(stage, PYTHON, "trainers/ppo_graph.py", "--config", str(options), "--graph", recipe.reference,
                   "--data", recipe.config["train_data"], "--index", str(recipe.index), "--model", recipe.model,
                   "--sampler", recipe.config["sampler"], "--seed", recipe.seed, "--top-k", recipe.top_k,
                   *recipe.fan_out, "--out", str(stage), "--resume", "--no-progress")
    recipe.model = str(export)
    recipe.policy = trained.export_policy
    return read_records(stage / "metrics.jsonl")


def fixed_workflows_stage(recipe: Recipe, folder: Path) -> Path | None:
    """Stage 4c: the final weights run as each ``fixed_workflows`` entry on the
    held-out questions (greedy, no planner): the honest baseline for what planning adds."""
    workflows = recipe.config.get("fixed_workflows") or []
    return recipe.headroom(folder, recipe.config["eval_data"], workflows) if workflows else None


def fixed_baselines(fixed: Path | None) -> list[Path]:
    """The fixed workflows the trained team is compared with: the first one listed (RA,AG in
    the shipped config) and the best by F1, when that is another."""
    if fixed is None:
        return []
    folders = [fixed / c.folder for c in read_candidates(fixed)]
    best = max(folders, key=lambda f: mean(records(f), "f1"))
    return [folders[0]] + ([best] if best != folders[0] else [])


def compare(recipe: Recipe, after: Path, against: list[tuple[str, Path]]) -> list[str]:
    """Stage 5a: ``ragteam compare`` (paired bootstrap) of the final team against each run."""
    tables = []
    for name, baseline in against:
        table = own_file(recipe.out / f"compare_{name}.md")
        table.unlink(missing_ok=True)  # the recipe's own table, remade (compare writes only new files)
        sh(RAGTEAM, "compare", str(baseline), str(after), "--out", str(table))
        tables.append(table.read_text())
    return tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="examples/jade_hotpotqa.yaml")
    parser.add_argument("--out", default="runs/learn_jade")
    parser.add_argument("--no-ppo", action="store_true", help="stop after the warm start (skip `ppo:`)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:  # the whole recipe is checked before any stage starts
        config = load_recipe(args.config, ROOT).model_dump()
        method = get_method(config["graph"])
        out = claim(ROOT / args.out, RECIPE)  # a folder of the recipe's own: never a user's files
    except ValueError as error:
        print(f"learning_recipe: {str(error)[:2000]}", file=sys.stderr)
        return 2
    if config["cpu_kv_cache_gib"]:  # every stage's engine inherits it
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(config["cpu_kv_cache_gib"])
    # ``model`` is what the first round fine-tunes: the untrained policy's weights, unless a test
    # pairs a scripted team with a tiny model
    initial = config.get("policy", "offline")
    recipe = Recipe(config, args.config, out, config["graph"], method.name, initial, initial,
                    config.get("model", "offline"))
    exit_on_sigterm()  # a stopped stage unwinds: its command ends and its time is recorded
    try:
        return run_stages(recipe, args.no_ppo)
    except StageFailed as error:
        print(f"learning_recipe: {error}", file=sys.stderr)
        return 1


def run_stages(recipe: Recipe, no_ppo: bool) -> int:
    """Every stage in order, each skipped once its output is complete (so a rerun resumes)."""
    config, out, ppo = recipe.config, recipe.out, recipe.config.get("ppo")
    started = time.perf_counter()
    build_index(recipe)
    recipe.evaluate(",".join([*config["baselines"], recipe.reference]), out / "eval_before", config["eval_data"])
    rounds, start = [], 0
    for number, options in enumerate(config["rounds"], 1):
        start = options["offset"] if options["offset"] is not None else start  # default: after the previous round's
        rounds.append(warm_start_round(recipe, number, options, start))
        start += options["questions"]
    recipe.evaluate(recipe.reference, out / "eval_after", config["eval_data"])
    graph, before, after = recipe.graph, out / "eval_before", out / "eval_after" / recipe.graph
    warm, ppo_metrics = None, []
    if ppo and not no_ppo:
        ppo_metrics = ppo_stage(recipe, ppo)
        recipe.evaluate(recipe.reference, out / "eval_after_ppo", config["eval_data"])
        warm, after = after, out / "eval_after_ppo" / graph
    # only the final weights run as each fixed workflow: that is the comparison the report makes,
    # and on a CPU each workflow costs as much as an evaluation of the team
    fixed = fixed_workflows_stage(recipe, out / ("eval_after_ppo_fixed" if warm else "eval_after_fixed"))

    against = [(name, before / name) for name in [graph, *config["baselines"]]]
    against += [(f"own_weights_{folder.name}", folder) for folder in fixed_baselines(fixed)]
    comparisons = compare(recipe, after, against + ([("warm_start", warm)] if warm else []))
    rows = {f"{name} (untrained)": records(before / name) for name in [*config["baselines"], graph]}
    if warm:
        rows[f"{graph} (warm start)"] = records(warm)
    rows[f"{graph} (trained)"] = records(after)
    print(write_report(recipe, rows, rounds, ppo_metrics, comparisons,
                       round((time.perf_counter() - started) / 60, 1), fixed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
