"""What is serial decomposition worth on PhantomWiki when the decomposer is perfect? The team run as
``RA,AG``, as ``QDS``, and as ``QDS`` with every decomposition written by the question's own chain
(inside out, one sub-question a hop, ``#k`` for the k-th answer: what a perfect decomposer writes,
``examples/research/phantomwiki/phantomwiki_reach.py``), all else (sub-answers, the final answer, retrieval) the
model's. Greedy, on the same questions, so the three are paired.

    python examples/research/phantomwiki/phantomwiki_oracle_decomposer.py --data ../shared/data/phantomwiki/phantomwiki-dev.jsonl \\
        --index runs/pw_wf/index_eval --policy offline:qwen2.5-coder-0.5b --sampler vllm --out runs/pw_oracle \\
        --fan-out 5

If ``QDS`` with perfect decompositions beats ``RA,AG`` where ``phantomwiki_reach.py`` says it can
reach more (2–3 hops), the decomposer is what keeps JADE's planner from gaining by decomposing;
if not, the reader cannot use the hops even when they are handed over. ``--fan-out N`` adds both
``QDS`` candidates with one retrieval per name of a listed earlier answer (``Settings.fan_out``).
Each candidate's runs go to
OUT/<candidate>/ (resumable: a rerun finishes what is missing); the table and the paired
differences to ``RA,AG`` are printed and written to OUT/summary.md.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from dataclasses import replace
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[3]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling phantomwiki_reach

from phantomwiki_reach import parse_question, sub_questions  # noqa: E402

# (label, its folder under OUT, the fixed workflow, whether the perfect chain decomposes)
CANDIDATES = (("RA,AG", "wf-RA-AG", "RA,AG", False), ("QDS", "wf-QDS", "QDS", False),
              ("QDS, perfect decomposer", "wf-QDS-perfect", "QDS", True))
# with --fan-out N, the two QDS candidates again with Settings.fan_out = N (one retrieval per name)
FANNED = (("QDS, perfect decomposer, fan-out", "wf-QDS-perfect-fan-out", "QDS", True),
          ("QDS, fan-out", "wf-QDS-fan-out", "QDS", False))
QUESTION = re.compile(r"Question:\s*(.+?)\s*$", re.S)


def perfect_decomposition(request, plural_wording: bool = False) -> str:
    """A QDS reply for ``request``: its question's chain, or the question itself as the one
    sub-question when it is not a templated chain (or has a single hop); ``plural_wording``:
    "Who are all the friends of #1?" rather than the world's "Who is the friend of #1?"."""
    from ragteam.nodes.policies.scripted import user_content

    found = QUESTION.search(user_content(request))
    question = found.group(1).strip() if found else user_content(request).strip()
    chain = parse_question(question)
    subs = sub_questions(chain, lambda k: f"#{k}", plural_wording) if chain is not None else []
    if len(subs) < 2:
        subs = [question]
    return "\n".join(f"<q{i}>{sub}</q{i}>" for i, sub in enumerate(subs, 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="PhantomWiki questions (JSONL)")
    parser.add_argument("--index", required=True, help="an index of the same world's corpus")
    parser.add_argument("--policy", default="offline:qwen2.5-coder-0.5b")
    parser.add_argument("--sampler", choices=["hf", "vllm"], default="vllm")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--limit", type=int, default=None, help="the first N questions")
    parser.add_argument("--fan-out", type=int, default=0, metavar="N",
                        help="also run both QDS candidates retrieving once per name, up to N names a hop")
    parser.add_argument("--plural", action="store_true",
                        help='the perfect decomposer asks "Who are all the friends of #1?" (the untrained reader '
                             'names one person to the singular wording, several to the plural)')
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    from ragteam.graphs.eval.compare import compare_runs, comparison_markdown
    from ragteam.graphs.eval.evaluate import evaluate_graph, graph_identity
    from ragteam.graphs.eval.headroom import headroom_markdown, headroom_rows, question_types
    from ragteam.graphs.methods import build_graph
    from ragteam.nodes.context import make_context
    from ragteam.nodes.written import WrittenReplies
    from ragteam.nodes.policies.scripted import ScriptedPolicy
    from ragteam.stores.datasets import read_dataset
    from ragteam.stores.owned import EVAL, check_owned, claim, own_file, write_text

    out = check_owned(args.out, EVAL)
    examples = read_dataset(args.data).examples[: args.limit]
    ctx = make_context(args.policy, args.index, args.sampler, top_k=args.top_k, temperature=0.0)
    decomposer = ScriptedPolicy({"QDS": lambda request: perfect_decomposition(request, args.plural)},
                                name="perfect-decomposer", exact_ids=False)
    jade = build_graph("jade")
    claim(out, EVAL)
    records = {}
    perfect_chain = "perfect chain, plural wording" if args.plural else "perfect chain"
    # the fanned candidates run right after RA,AG: they are what --fan-out is asked for
    candidates = (CANDIDATES[0], *(FANNED if args.fan_out else ()), *CANDIDATES[1:])
    for label, folder, workflow, perfect in candidates:
        fan_out = args.fan_out if (label, folder, workflow, perfect) in FANNED else 0
        team = replace(ctx.team, bindings={**ctx.team.bindings, "QDS": decomposer}) if perfect else ctx.team
        run_ctx = replace(ctx, team=team, settings=ctx.settings.updated(
            written=WrittenReplies.fixed(workflow, ctx.settings.planning.fallback), serial={"fan_out": fan_out}))
        identity = graph_identity(jade, graph="jade", source="ragteam", fixed_workflow=workflow,
                                  top_k=args.top_k, decomposer=perfect_chain if perfect else "the model",
                                  **({"fan_out": fan_out} if fan_out else {}))
        done = asyncio.run(evaluate_graph(folder, jade, examples, run_ctx, out, args.concurrency,
                                          identity=identity))
        records[label] = {r["id"]: r for r in done}
    rows, choosers = headroom_rows(records, question_types(examples))
    text = headroom_markdown(f"PhantomWiki, top-{args.top_k}, policy {args.policy}", rows, choosers)
    folders = {label: out / folder for label, folder, _, _ in candidates}
    pairs = [("RA,AG", "QDS"), ("RA,AG", "QDS, perfect decomposer"), ("QDS", "QDS, perfect decomposer")]
    if args.fan_out:
        pairs += [("RA,AG", "QDS, fan-out"), ("RA,AG", "QDS, perfect decomposer, fan-out"),
                  ("QDS, perfect decomposer", "QDS, perfect decomposer, fan-out")]
    for base, other in pairs:
        text += "\n\n" + comparison_markdown(base, other, compare_runs(folders[base], folders[other]))
    write_text(own_file(out / "summary.md"), text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
