"""Quickstart: ragteam's team on a few bundled HotpotQA questions, offline, untrained.

    make quickstart          # or: python examples/quickstart.py [N]      (N questions, default 4)

Runs JADE (a planner chooses a workflow per question, the roles carry it out) and vanilla RAG
(retrieve, then answer) on the same N questions with the packaged SmolLM2-135M model and the
bundled BM25 store. All runs go at once, so their model calls are batched together. Prints one
line per question, the trace of one run, each method's mean F1, where training takes the model,
and what to run next; every model call goes to runs/quickstart.jsonl.
"""

import asyncio
import os
import sys
from pathlib import Path

# Before transformers loads: a newcomer's first screen is the answers, not library chatter.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_CHECKOUT = Path(__file__).resolve().parents[1]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.graphs.eval.metrics import score
from ragteam.graphs.methods import build_graph
from ragteam.graphs.run import arun_many
from ragteam.nodes.context import RunContext, Settings
from ragteam.nodes.policies.spec import load_policy
from ragteam.nodes.team import Team
from ragteam.nodes.tracing import render_tree, write_jsonl
from ragteam.stores.demo import demo_questions, demo_retriever

TOP_K = 2  # passages per retrieval: the learning run's measurements use top-2 for every method
METHODS = {"vanilla RAG": "vanilla_rag", "JADE": "jade"}
# docs/results/hotpotqa_learning.md: F1 on the 200 held-out dev questions, top-2
UNTRAINED_F1, TRAINED_F1, VANILLA_F1 = 20.1, 29.8, 22.0
NEXT = (("your own graph", 'ragteam run --graph examples/verified_rag.py:graph "Who is Ed Wood?"'
                           "   (guide: docs/compose_your_own_graph.md)"),
        ("Studio", "ragteam studio examples/verified_rag.py:graph && "
                   "langgraph dev --config langgraph.ragteam.json --host 127.0.0.1"),
        ("training", "python trainers/ppo_graph.py --steps 2"))


def quiet_transformers() -> None:
    """No progress bars or notices from the model loader (the environment above covers most)."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def shorten(text: str, width: int) -> str:
    """``text`` on one line, cut at a word boundary to fit ``width`` (an ellipsis marks the cut)."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text[: width - 1].rsplit(" ", 1)[0] if " " in text[: width - 1] else text[: width - 1]
    return cut.rstrip(",;:.") + "…"


def workflow(result) -> str:
    """The workflow JADE's planner chose for the question (``*``: its reply was unusable, so the
    fallback ran) and how many rounds followed it (on the sub-questions of a decomposition)."""
    if not result.rounds:
        return "-"
    first, more = result.rounds[0], len(result.rounds) - 1
    return first.workflow + ("" if first.planner_ok else "*") + (f" (+{more} rounds)" if more else "")


def main(n: int = 4) -> None:
    quiet_transformers()
    examples = demo_questions()[:n]
    questions = [e["question"] for e in examples]
    ctx = RunContext(Team(load_policy("offline")), demo_retriever(), Settings(max_rounds=4, top_k=TOP_K))

    async def both():
        return await asyncio.gather(*(arun_many(build_graph(name), questions, ctx) for name in METHODS.values()))

    results = dict(zip(METHODS, asyncio.run(both())))
    f1 = {method: [100 * score(r.answer, [e["answer"]])["f1"] for r, e in zip(runs, examples)]
          for method, runs in results.items()}

    print(f"JADE on {len(examples)} HotpotQA questions (SmolLM2-135M, untrained; BM25 top-{TOP_K}; F1 ×100)\n")
    print(f" #  {'question':<38}  {'answer':<28}  {'gold':<17} {'F1':>5}  {'workflow':<15} calls")
    for i, (example, run, score_) in enumerate(zip(examples, results["JADE"], f1["JADE"]), 1):
        print(f"{i:>2}  {shorten(run.question, 38):<38}  {shorten(run.answer, 28) or '(none)':<28}  "
              f"{shorten(example['answer'], 17):<17} {score_:>5.1f}  {workflow(run):<15} "
              f"{int(run.costs.get('llm_calls', 0)):>5}")
    if any(r.rounds and not r.rounds[0].planner_ok for r in results["JADE"]):
        print(f"(* the planner's reply was unusable, so the fallback workflow "
              f"{ctx.settings.planning.fallback} ran)")

    print("\nTrace of question 1 (every model call, in order; ✗ = the reply broke the role's format "
          "and the runtime fell back):")
    print(render_tree(results["JADE"][0].transitions))

    print(f"\n{'method':<12} {'mean F1':>8} {'calls/q':>8} {'format violations/q':>20}")
    for method, runs in results.items():
        calls, violations = (sum(r.costs.get(key, 0) for r in runs) / len(runs)
                             for key in ("llm_calls", "format_violations"))
        print(f"{method:<12} {sum(f1[method]) / len(runs):>8.1f} {calls:>8.1f} {violations:>20.1f}")

    print(f"\nThe model is untrained: SmolLM2-135M-Instruct as packaged, so it often breaks the roles' "
          f"output formats and\nanswers at length. The learning recipe (examples/learning_recipe.py, "
          f"docs/results/hotpotqa_learning.md)\ntrains it: on 200 held-out HotpotQA questions "
          f"JADE goes from {UNTRAINED_F1} F1 untrained to {TRAINED_F1} after the recipe\n"
          f"(vanilla RAG, untrained: {VANILLA_F1}). A handful of questions, as here, says little either way.")

    out = Path("runs") / "quickstart.jsonl"
    out.parent.mkdir(exist_ok=True)
    transitions = [t for runs in results.values() for r in runs for t in r.transitions]
    write_jsonl(transitions, out)
    print(f"\n{len(transitions)} model calls written to {out}")

    print("\nNext (from the repository root, after `. .venv/bin/activate`):")
    for what, command in NEXT:
        print(f"  {what + ':':<16} {command}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
