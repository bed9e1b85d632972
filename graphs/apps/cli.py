"""The ``ragteam`` command line."""

from __future__ import annotations

import argparse
import os
import random
import sys

from ragteam.graphs.apps.progress import add_progress_options, progress_mode
from ragteam.nodes.policies.protocol import EngineError
from ragteam.nodes.roles.jade import SERIAL_EXAMPLES
from ragteam.nodes.tracing import render_tree, write_jsonl
from ragteam.stores.jsonl import dumps_line

# C0/C1 control characters except newline and tab: model text must not drive the terminal.
_CONTROL = dict.fromkeys([*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0)])


def printable(text: str) -> str:
    """Model-written text as it may be shown on a terminal (escape sequences removed)."""
    return str(text).translate(_CONTROL)


def refused(error: OSError) -> str:
    """A path the system refused (no permission, a read-only mount, a full disk) as one line
    naming it, for a command's message instead of a traceback."""
    return f"{error.filename or ''}: {error.strerror or error}"


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def bounded_int(low: int, high: int):
    """An argparse type for an integer in [low, high]."""
    def parse(value: str) -> int:
        number = int(value)
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"must be between {low:,} and {high:,}, got {value}")
        return number
    parse.__name__ = "integer"
    return parse


def _finite(value: str) -> float:
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {value}")
    return number


def positive_float(value: str) -> float:
    number = _finite(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
    return number


def nonnegative_float(value: str) -> float:
    number = _finite(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return number


def fraction(value: str) -> float:
    number = _finite(value)
    if not 0 <= number <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return number


def nonblank(value: str) -> str:
    """A text argument as it enters: lone surrogates (undecodable argv bytes) become U+FFFD,
    and a blank one is refused."""
    from ragteam.stores.text import clean_text

    text = clean_text(value)
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


POLICY_HELP = ("offline[:NAME] | scripted | hf:PATH | vllm:PATH | vllm-server:URL | adapters:DIR | rules:NAME | "
               "langchain:FILE.py:NAME (nodes/policies/spec.py)")


def renamed_flag(old: str, new: str):
    """An argparse ``type`` for a flag of earlier versions: any value is refused with one line
    naming the new spelling (one word, one meaning)."""
    def refuse(value: str) -> str:
        raise argparse.ArgumentTypeError(f"{old} {value} is now {new} {value}")
    return refuse


def add_sampler_option(command: argparse.ArgumentParser, default: str | None = "hf", help: str = "") -> None:
    """``--sampler hf|vllm``: what samples a model policy's replies (``--engine``, its old name,
    refused naming it)."""
    command.add_argument("--sampler", choices=["hf", "vllm"], default=default,
                         help=help or "sample a model policy's replies with HF generate or a vLLM engine")
    command.add_argument("--engine", type=renamed_flag("--engine", "--sampler"), help=argparse.SUPPRESS)


def _add_model_options(command: argparse.ArgumentParser) -> None:
    """What serves the roles and how they decode: shared by ``run`` and ``eval``."""
    command.add_argument("--policy", default="offline",
                         help=POLICY_HELP)
    add_sampler_option(command)
    command.add_argument("--frozen-policy", metavar="SPEC",
                         help="serve the method's frozen roles (MAO-ARAG's executors, QAgent's generator) "
                         "with this policy, e.g. the untrained model beside a trained planner, or a "
                         "langchain chat model: langchain:FILE.py:NAME (default: --policy)")
    command.add_argument("--seed", type=int, default=0)
    command.add_argument("--temperature", type=nonnegative_float, default=0.0, help="0 = greedy")
    command.add_argument("--max-rounds", type=positive_int, default=None)
    command.add_argument("--top-k", type=positive_int, default=None, help="documents per retrieval")
    _add_fan_out_option(command)


def _add_fan_out_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--fan-out", type=bounded_int(0, 64), default=None, metavar="N",
                         help="a sub-question naming an earlier answer of several names retrieves once "
                         "per name, for up to N names (default 0: once, the names joined)")


GRAPH_HELP = ("a method name (`ragteam graphs` lists them), a workflow such as QR,RA,DS,AG, or your own "
              "graph as path/to/file.py:NAME or package.module:NAME")


def _run_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("question", type=nonblank)
    run.add_argument("--graph", default="jade", help=GRAPH_HELP.replace(", a workflow such as QR,RA,DS,AG", ""))
    _add_model_options(run)
    run.add_argument("--trace-out", help="write the run's transitions as JSON lines")
    run.add_argument("--index", help="a built index directory (default: bundled BM25 demo store)")
    run.add_argument("--json", action="store_true", help="print the result as JSON")
    run.add_argument("--report", help="write a self-contained HTML page of the run")


def _eval_options(evaluate: argparse.ArgumentParser) -> None:
    evaluate.add_argument("--graph", default="jade", help="comma-separated: "
                          + GRAPH_HELP.replace(", a workflow such as QR,RA,DS,AG", ""))
    evaluate.add_argument("--data", default=None,
                          help="FlashRAG JSONL, {question, answer} JSON/JSONL, or HotpotQA JSON "
                               "(default: the bundled 53 HotpotQA dev questions)")
    evaluate.add_argument("--index", help="a built index directory (default: bundled BM25 demo store)")
    evaluate.add_argument("--limit", type=positive_int, default=None, help="the first N questions")
    evaluate.add_argument("--concurrency", type=positive_int, default=8)
    evaluate.add_argument("--out", required=True)
    _add_model_options(evaluate)
    evaluate.add_argument("--skip-bad", action="store_true", help="skip malformed records (counted)")
    add_progress_options(evaluate)
    evaluate.add_argument("--compare-to", metavar="RUN",
                          help="another eval's graph folder or predictions.jsonl on the same data: "
                               "print each graph's paired difference to it with a bootstrap interval")


def _compare_options(compare: argparse.ArgumentParser) -> None:
    compare.add_argument("a", help="baseline: an eval graph folder (OUT/GRAPH) or its predictions.jsonl")
    compare.add_argument("b", help="the run compared with it")
    compare.add_argument("--resamples", type=bounded_int(1, 1_000_000), default=10_000,
                         help="bootstrap resamples (at most 1,000,000)")
    compare.add_argument("--seed", type=int, default=0)
    compare.add_argument("--by-type", metavar="DATA", help="the QA file both runs answered: also the F1 "
                         "difference on each question type (metadata.type, e.g. PhantomWiki's hops-N)")
    compare.add_argument("--out", help="also write the table to this Markdown file")


def _draw_options(draw: argparse.ArgumentParser) -> None:
    draw.add_argument("--graph", default="jade", help=GRAPH_HELP)
    draw.add_argument("--out", default="drawings",
                      help="a folder of ragteam's for <name>.mmd and <name>.svg (created; a folder "
                           "with files of yours is refused)")


def _index_options(index: argparse.ArgumentParser) -> None:
    index.add_argument("--corpus", action="append", required=True,
                       help="JSONL {id,title,text}, DPR .tsv, or HotpotQA .json; repeatable")
    index.add_argument("--kind", choices=["bm25", "chroma", "hybrid"], default="hybrid")
    index.add_argument("--out", required=True)
    index.add_argument("--model", default="minilm",
                       help="embedding model: 'minilm' (packaged all-MiniLM-L6-v2) or a local path")
    index.add_argument("--chunk-words", type=positive_int, default=None, help="split texts into word windows")
    index.add_argument("--chunk-overlap", type=bounded_int(0, 10**9), default=20)


def _graphs_options(listing: argparse.ArgumentParser) -> None:
    listing.add_argument("references", nargs="*", metavar="FILE.py:NAME",
                         help="also load and check these graphs of your own")


def _studio_options(studio: argparse.ArgumentParser) -> None:
    studio.add_argument("references", nargs="+", metavar="FILE.py:NAME", help="your graphs")
    studio.add_argument("--out", default="langgraph.ragteam.json",
                        help="the config to write (a file of yours there is refused, never replaced)")


def _headroom_options(headroom: argparse.ArgumentParser) -> None:
    headroom.add_argument("--workflow", action="append", metavar="WORKFLOW",
                          help="a JADE workflow run without the planner, e.g. QR,RA,AG (repeatable; "
                               "default: RA,AG QR,RA,AG RA,DS,AG QDS QDP [RA|QR,RA],DS,AG)")
    headroom.add_argument("--graph", action="append", default=[], help="also a graph as a candidate: "
                          + GRAPH_HELP.replace(", a workflow such as QR,RA,DS,AG", "") + " (repeatable)")
    headroom.add_argument("--top-k", dest="top_ks", type=positive_int, action="append",
                          help="retrieval budgets to compare (repeatable; default 5)")
    headroom.add_argument("--data", default=None, help="QA file (default: the bundled 53 questions)")
    headroom.add_argument("--index", help="a built index directory (default: bundled BM25 demo store)")
    headroom.add_argument("--limit", type=positive_int, default=None, help="the first N questions")
    headroom.add_argument("--concurrency", type=positive_int, default=8)
    headroom.add_argument("--out", required=True)
    headroom.add_argument("--policy", default="offline",
                          help=POLICY_HELP)
    add_sampler_option(headroom)
    headroom.add_argument("--seed", type=int, default=0)
    headroom.add_argument("--temperature", type=nonnegative_float, default=0.0)
    headroom.add_argument("--max-rounds", type=positive_int, default=None)
    headroom.add_argument("--decomposer-example-steps", type=int, action="append", default=[], metavar="N",
                          choices=sorted(SERIAL_EXAMPLES), help="also run each workflow that decomposes "
                          "serially with the decomposer shown an example chain of N steps (repeatable): a "
                          "small model copies its example's length, so this samples other decompositions")
    headroom.add_argument("--given-decompositions", metavar="FILE", default=None,
                          help="also run each workflow that decomposes serially with the decomposer's reply "
                          "for each question written as FILE's chain (nodes/decompositions.py, e.g. "
                          "examples/research/phantomwiki/phantomwiki_chains.py): what the executors reach from the right chains")
    _add_fan_out_option(headroom)
    add_progress_options(headroom)


def _train_options(train: argparse.ArgumentParser) -> None:
    train.add_argument("trainer", choices=[*TRAINERS, "recipe"])
    train.add_argument("arguments", nargs=argparse.REMAINDER, help="the trainer's own options")


def _search_options(search: argparse.ArgumentParser) -> None:
    search.add_argument("query", type=nonblank)
    search.add_argument("--index", required=True)
    search.add_argument("-k", type=positive_int, default=5)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragteam", description="Agentic RAG graphs on LangGraph.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_options, _) in COMMANDS.items():
        add_options(commands.add_parser(name, help=help_text))
    return parser


def check_model_options(args: argparse.Namespace) -> None:
    """The policy specs and the index path, checked before anything heavy is imported."""
    from pathlib import Path

    from ragteam.nodes.policies.spec import check_policy_spec

    check_policy_spec(args.policy)
    if args.sampler == "vllm" and not args.policy.startswith(("hf:", "offline", "vllm:", "adapters:")):
        raise ValueError(f"--sampler vllm serves a model; --policy {args.policy} has none to serve "
                         "(give --policy offline, hf:PATH or adapters:DIR, or leave --sampler out)")
    if getattr(args, "frozen_policy", None):  # run and eval have one; headroom does not
        check_policy_spec(args.frozen_policy)
    if args.index is not None and not Path(args.index).is_dir():
        if Path(args.index).is_file():  # most often the corpus itself, given where its index goes
            raise ValueError(f"--index {args.index}: a file, not an index folder; if it is a corpus, build "
                             f"its index first: ragteam index --corpus {args.index} --out INDEX_DIR, "
                             "then --index INDEX_DIR")
        raise ValueError(f"--index {args.index}: no index folder there (build one with `ragteam index`)")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import torch
        torch.manual_seed(seed)
    except ImportError:
        pass


def build_context(args: argparse.Namespace):
    """Policy, retriever and settings from the shared command-line options."""
    from ragteam.nodes.context import make_context

    overrides = {k: v for k, v in {"max_rounds": args.max_rounds, "top_k": getattr(args, "top_k", None),
                                   "temperature": args.temperature}.items() if v is not None}
    if args.fan_out is not None:
        overrides["serial"] = {"fan_out": args.fan_out}
    return make_context(args.policy, args.index, args.sampler, **overrides)


def fan_out_identity(args: argparse.Namespace) -> dict:
    """What a results folder records of ``--fan-out``: the setting when on (it changes the
    results), nothing when off, so folders written before the option existed still match."""
    return {"fan_out": args.fan_out} if args.fan_out else {}


def method_context(ctx, method, frozen_policy):
    """``ctx`` with the method's frozen roles bound to ``frozen_policy`` (unchanged without one)."""
    from dataclasses import replace

    from ragteam.nodes.team import Team

    if frozen_policy is None or not method.frozen_roles:
        return ctx
    return replace(ctx, team=Team.with_frozen(ctx.team.default, frozen_policy, method.frozen_roles))


def load_frozen_policy(args: argparse.Namespace, methods: list):
    """The ``--frozen-policy`` model, loaded only when one of the methods freezes roles."""
    from ragteam.nodes.policies.spec import load_policy

    if not args.frozen_policy or not any(method.frozen_roles for method in methods):
        return None
    return load_policy(args.frozen_policy, args.sampler)


def run_command(args: argparse.Namespace) -> int:
    from ragteam.graphs.methods import get_method
    from ragteam.graphs.run import RunFailed, run
    from ragteam.stores.owned import new_file

    trace_out, report = new_file(args.trace_out, "--trace-out"), new_file(args.report, "--report")
    if trace_out is not None and trace_out == report:
        raise ValueError("--trace-out and --report name the same file")
    check_model_options(args)
    seed_everything(args.seed)
    method = get_method(args.graph)  # an unknown or broken graph fails before any model loads
    graph = method.graph()
    ctx = method_context(build_context(args), method, load_frozen_policy(args, [method]))
    try:
        result = run(graph, args.question, ctx)
    except RunFailed as failed:  # the run broke, not the command line: exit 1 (2 is bad usage)
        if trace_out:  # the calls made before the failure are the clue to it
            new_file(trace_out, "--trace-out")
            write_jsonl(failed.transitions, trace_out)
        print("ragteam run: " + printable(failed.message).replace("\n", " ")[:2000], file=sys.stderr)
        return 1
    if trace_out:
        new_file(trace_out, "--trace-out")  # still new: nothing appeared there during the run
        write_jsonl(result.transitions, trace_out)
    if report:
        from ragteam.graphs.apps.report import write_report
        write_report(result, new_file(report, "--report"), graph, method.name)
    if args.json:
        print(dumps_line({"answer": result.answer, "topologies": result.topologies,
                         "costs": result.costs, "stop_reason": result.stop_reason,
                         "outputs": result.outputs}))
        return 0
    print(f"Question : {printable(result.question)}")
    print(f"Answer   : {printable(result.answer)}")
    print(f"Stopped  : {result.stop_reason}")
    for key, value in result.outputs.items():
        print(printable(f"{key:<9}: {value}"))
    for record in result.rounds:
        flag = "" if record.planner_ok else f"  (planner format violation -> fallback: {record.planner_violation})"
        print(printable(f"Round {record.round} [{record.task_id}] {record.workflow}: {record.question}{flag}"))
    costs = result.costs
    print("Costs    : " + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                                   for k, v in sorted(costs.items())))
    print("\nTrace\n" + printable(render_tree(result.transitions)))
    if args.trace_out:
        print(f"\n{len(result.transitions)} transitions written to {args.trace_out}")
    if args.report:
        print(f"report written to {args.report}")
    return 0


def index_command(args: argparse.Namespace) -> int:
    from ragteam.stores.embeddings import EmbedderConfig
    from ragteam.stores.index import build_index

    manifest = build_index(args.corpus, args.kind, args.out, EmbedderConfig(model=args.model),
                           chunk_words=args.chunk_words, chunk_overlap=args.chunk_overlap,
                           progress=sys.stderr.isatty())
    print(f"{manifest['kind']} index of {manifest['n_documents']} documents at {args.out} "
          f"({manifest['embedded']} embedded, {manifest['build_seconds']:.1f} s)")
    return 0


def search_command(args: argparse.Namespace) -> int:
    from ragteam.stores.index import open_index

    for rank, doc in enumerate(open_index(args.index).search(args.query, args.k), 1):
        text = doc.text if len(doc.text) <= 160 else doc.text[:159] + "…"
        print(printable(f"{rank:>2}. [{doc.id}] {doc.title}  (score {doc.score:.4f})\n    {text}"))
    return 0


def draw_command(args: argparse.Namespace) -> int:
    from ragteam.graphs.apps.drawing import mermaid, svg
    from ragteam.graphs.compiler import compile_topology
    from ragteam.graphs.methods import get_method, methods
    from ragteam.graphs.methods.references import is_reference
    from ragteam.nodes.topology import FormatViolation, parse_topology

    from ragteam.stores.owned import DRAWINGS, check_owned, claim, own_file, write_text

    out = check_owned(args.out, DRAWINGS)  # before any work: never a user's folder or files
    if args.graph in methods() or is_reference(args.graph):
        method = get_method(args.graph)
        graph, name = method.graph(), method.name
    else:  # a workflow topology, e.g. "[RA|QR,RA],DS,AG"
        topology = parse_topology(args.graph)
        if isinstance(topology, FormatViolation):
            raise ValueError(f"{args.graph!r} is neither a graph name nor a valid workflow: {topology.reason} "
                             f"(graphs: `ragteam graphs`; your own: path/to/file.py:NAME)")
        graph, name = compile_topology(topology), "workflow-" + "".join(
            c if c.isalnum() else "_" for c in str(topology))
    picture = svg(graph, title=args.graph)
    claim(out, DRAWINGS)
    write_text(own_file(out / f"{name}.mmd"), mermaid(graph))
    write_text(own_file(out / f"{name}.svg"), picture)
    print(f"wrote {out / (name + '.mmd')} and {out / (name + '.svg')}")
    return 0


def named_methods(references: str) -> dict:
    """``--graph``'s comma-separated references, each loaded and checked before any work, by the
    name whose folder (OUT/<name>) each writes; two of one name are refused."""
    from ragteam.graphs.methods import get_method

    chosen = {}
    for reference in (n.strip() for n in references.split(",") if n.strip()):
        method = get_method(reference)
        if method.name in chosen:
            raise ValueError(f"two graphs named {method.name!r} in --graph (each writes OUT/{method.name})")
        chosen[method.name] = method
    return chosen


def eval_command(args: argparse.Namespace) -> int:
    import asyncio

    from ragteam.graphs.eval.evaluate import (check_identity, evaluate_graph, graph_identity, plot_summary,
                                      read_failures, summarize, summary_markdown, unfinished_graphs)
    from ragteam.stores.datasets import read_dataset
    from ragteam.stores.demo import DEMO_QUESTIONS
    from ragteam.stores.owned import EVAL, check_owned, own_file, write_text

    out = check_owned(args.out, EVAL)  # before any work: a user's folder is never written into
    dataset = read_dataset(args.data or DEMO_QUESTIONS, skip_bad=args.skip_bad)
    if dataset.skipped:
        print(f"skipped {len(dataset.skipped)} bad record(s), first: {dataset.skipped[0]}", file=sys.stderr)
    examples = dataset.examples[: args.limit] if args.limit else dataset.examples
    chosen = named_methods(args.graph)
    names = list(chosen)
    graphs = {name: method.graph() for name, method in chosen.items()}
    fan_out = fan_out_identity(args)
    identities = {name: graph_identity(graphs[name], graph=name, source=chosen[name].source, **fan_out)
                  for name in names}
    for name in names:  # only the graph that wrote a folder's records may reuse them
        check_identity(out / name, identities[name])
    unfinished = unfinished_graphs(out, names, examples)
    if unfinished:  # a rerun over a finished folder only rewrites the summary: no model is loaded
        check_model_options(args)
    ctx, frozen = ((build_context(args), load_frozen_policy(args, [chosen[n] for n in unfinished]))
                   if unfinished else (None, None))
    rows, records, failed = [], {}, {}
    for name, graph in graphs.items():
        seed_everything(args.seed)
        records[name] = asyncio.run(evaluate_graph(name, graph, examples,
                                                   method_context(ctx, chosen[name], frozen),
                                                   out, args.concurrency,
                                                   progress=progress_mode(args),
                                                   identity=identities[name]))
        rows.append(summarize(name, dataset.name, records[name]))
        failed[name] = read_failures(out, name)
    table = summary_markdown(rows)
    write_text(own_file(out / "summary.md"), f"# ragteam eval: {dataset.name}, policy {args.policy}\n\n{table}")
    plots = plot_summary(rows, records, out)
    print(table)
    print(f"wrote {out / 'summary.md'}, " + ", ".join(str(p) for p in plots))
    for name, failures in failed.items():
        if failures:  # the summary covers the others; a rerun with the same --out retries these
            print(f"{name}: {len(failures)} question(s) failed, first: {failures[0]['id']!r}: "
                  f"{printable(failures[0]['error'])} (all in {out / name / 'failures.jsonl'})", file=sys.stderr)
    if args.compare_to:
        from ragteam.graphs.eval.compare import compare_runs, comparison_markdown

        for name in names:
            rows = compare_runs(args.compare_to, out / name)
            print("\n" + comparison_markdown(args.compare_to, str(out / name), rows))
    return 1 if any(failed.values()) else 0


def headroom_candidates(args: argparse.Namespace, methods: list, budgets: list[int]) -> list:
    """The candidates ``--workflow``, ``--graph``, ``--decomposer-example-steps`` and
    ``--given-decompositions`` name, each checked (a workflow that does not parse, one given
    twice, a graph named as another candidate's folder, a bad decompositions file)."""
    from pathlib import Path

    from ragteam.graphs.eval.headroom import DEFAULT_WORKFLOWS, Candidate, workflow_candidates
    from ragteam.nodes.decompositions import read_decompositions
    from ragteam.nodes.topology import FormatViolation, parse_topology

    workflows = args.workflow or list(DEFAULT_WORKFLOWS)
    for workflow in workflows:
        if isinstance(parsed := parse_topology(workflow), FormatViolation):
            raise ValueError(f"--workflow {workflow!r}: {parsed.reason}")
    for flag, values in (("--workflow", [str(parse_topology(w)) for w in workflows]),
                         ("--graph", args.graph), ("--top-k", budgets)):
        if len(set(values)) < len(values):
            raise ValueError(f"{flag}: {min(v for v in values if values.count(v) > 1)!r} is given twice")
    given = args.given_decompositions and str(Path(args.given_decompositions).resolve())
    if given:
        read_decompositions(given)  # a bad file fails here, not inside the runs
    candidates = workflow_candidates(workflows, sorted(set(args.decomposer_example_steps)), given)
    fixed = len(candidates)
    candidates += [Candidate(m.name, m.name, None) for m in methods]
    folders = [c.folder for c in candidates]
    for candidate in candidates[fixed:]:
        if folders.count(candidate.folder) > 1:
            raise ValueError(f"--graph {candidate.label!r}: its name is another candidate's folder "
                             f"(OUT/top<k>/{candidate.folder}); name the graph otherwise")
    return candidates


def headroom_command(args: argparse.Namespace) -> int:
    import asyncio
    from dataclasses import replace
    from pathlib import Path

    from ragteam.graphs.eval.evaluate import check_identity, evaluate_graph, graph_identity
    from ragteam.graphs.eval.headroom import (FIXED_WORKFLOW_METHOD, Candidate, candidate_settings,
                                             headroom_markdown, headroom_rows, question_types, write_candidates)
    from ragteam.graphs.methods import build_graph, get_method
    from ragteam.stores.datasets import read_dataset
    from ragteam.stores.demo import DEMO_QUESTIONS
    from ragteam.stores.owned import EVAL, check_owned, claim, own_file, write_text

    # every input is checked before anything is written or loaded
    out = check_owned(args.out, EVAL)
    check_model_options(args)
    budgets = args.top_ks or [5]
    methods = [get_method(reference) for reference in args.graph]
    candidates = headroom_candidates(args, methods, budgets)
    graphs = {m.name: m.graph() for m in methods}
    jade = build_graph("jade")
    dataset = read_dataset(args.data or DEMO_QUESTIONS)
    examples = dataset.examples[: args.limit] if args.limit else dataset.examples

    fan_out = fan_out_identity(args)

    def identity(candidate: Candidate, k: int) -> dict:
        if candidate.workflow:
            return graph_identity(jade, graph=FIXED_WORKFLOW_METHOD, source="ragteam",
                                  fixed_workflow=candidate.workflow, top_k=k, **fan_out, **candidate.settings)
        method = next(m for m in methods if m.name == candidate.label)
        return graph_identity(graphs[candidate.label], graph=method.name, source=method.source, top_k=k,
                              **fan_out)

    identities = {(c.folder, k): identity(c, k) for c in candidates for k in budgets}
    for (folder, k), expected in identities.items():
        check_owned(out / f"top{k}", EVAL)
        check_identity(out / f"top{k}" / folder, expected)
    types = question_types(examples)
    ctx = build_context(args)
    claim(out, EVAL)
    sections = []
    for k in budgets:
        records, budget_dir = {}, claim(out / f"top{k}", EVAL)
        write_candidates(budget_dir, candidates)
        for candidate in candidates:
            seed_everything(args.seed)
            graph = jade if candidate.workflow else graphs[candidate.label]
            run_ctx = replace(ctx, settings=candidate_settings(ctx.settings, candidate, k))
            done = asyncio.run(evaluate_graph(candidate.folder, graph, examples, run_ctx, budget_dir,
                                              args.concurrency, progress=progress_mode(args),
                                              identity=identities[candidate.folder, k]))
            records[candidate.label] = {r["id"]: r for r in done}
        rows, choosers = headroom_rows(records, types)
        sections.append(headroom_markdown(f"top-{k} retrieval, {dataset.name}, policy {args.policy}", rows, choosers))
    text = "\n\n".join(sections)
    write_text(own_file(Path(out) / "headroom.md"), f"# ragteam headroom\n\n{text}\n")
    print(text + f"\n\nwrote {Path(out) / 'headroom.md'} (per-question records under {out}/top<k>/)")
    return 0


def compare_command(args: argparse.Namespace) -> int:
    from ragteam.graphs.eval.compare import by_type_markdown, compare_by_type, compare_runs, comparison_markdown
    from ragteam.graphs.eval.headroom import question_types
    from ragteam.stores.datasets import read_dataset
    from ragteam.stores.owned import create_text, new_file

    out = new_file(args.out, "--out")
    types = question_types(read_dataset(args.by_type).examples) if args.by_type else None
    bootstrap = {"resamples": args.resamples, "seed": args.seed}
    table = comparison_markdown(args.a, args.b, compare_runs(args.a, args.b, **bootstrap))
    if types is not None:
        table += "\n\n" + by_type_markdown(compare_by_type(args.a, args.b, types, **bootstrap))
    print(table)
    if out:
        create_text(out, table + "\n")
    return 0


def graphs_command(args: argparse.Namespace) -> int:
    from ragteam.graphs.methods import broken_methods, get_method, methods

    rows = [(m.name, m.source, m.summary) for m in methods().values()]
    rows += [(name, "BROKEN", why) for name, why in broken_methods().items()]
    rows += [(m.name, m.source, m.summary) for m in map(get_method, args.references)]
    width = max(len(name) for name, _, _ in rows)
    for name, source, summary in rows:
        print(printable(f"{name:<{width}}  {summary}" + ("" if source == "ragteam" else f"  [{source}]")))
    return 0


def studio_command(args: argparse.Namespace) -> int:
    from ragteam.graphs.apps.studio import write_langgraph_config

    yours = write_langgraph_config(args.references, args.out)
    print(f"wrote {args.out}: {', '.join(yours)} beside the built-in graphs; serve them with\n"
          f"  langgraph dev --config {args.out} --host 127.0.0.1")
    return 0


TRAINERS = {"ppo": "ragteam.trainers.ppo_graph", "sft": "ragteam.trainers.sft_graph",
            "learn-check": "ragteam.trainers.learn_check"}


def train_command(args: argparse.Namespace) -> int:
    """``ragteam train NAME ARGS``: the same code as ``python trainers/NAME.py ARGS``."""
    program, sys.argv[0] = sys.argv[0], f"ragteam train {args.trainer}"  # the trainer's parser names itself
    try:
        return _trainer_main(args.trainer)(args.arguments)
    finally:
        sys.argv[0] = program


def _trainer_main(trainer: str):
    if trainer == "recipe":  # a product kept beside the library, in a checkout's examples/
        import runpy
        from pathlib import Path

        examples = Path(__file__).resolve().parents[2] / "examples"
        if not (examples / "learning_recipe.py").is_file():
            raise ValueError("ragteam train recipe runs examples/learning_recipe.py of a checkout; "
                             "this installation has none")
        if str(examples) not in sys.path:  # its sibling modules (recipe_config, recipe_report)
            sys.path.insert(0, str(examples))
        return runpy.run_path(str(examples / "learning_recipe.py"), run_name="learning_recipe")["main"]
    import importlib

    return importlib.import_module(TRAINERS[trainer]).main


# each command: its one-line help, what adds its options, and what runs it
COMMANDS = {
    "run": ("answer one question with a method graph", _run_options, run_command),
    "eval": ("run graphs on a QA dataset; write records, summary, plots", _eval_options, eval_command),
    "compare": ("paired difference of two evals on the same questions (B − A, bootstrap interval)",
                _compare_options, compare_command),
    "draw": ("write a graph as Mermaid and as an SVG image", _draw_options, draw_command),
    "index": ("build a retrieval index (atomic; reruns resume)", _index_options, index_command),
    "graphs": ("list every known graph: built-in, installed (entry points) and any you name here",
               _graphs_options, graphs_command),
    "studio": ("write a langgraph.json serving your graphs beside the built-in ones (then: langgraph "
               "dev --config FILE)", _studio_options, studio_command),
    "headroom": ("run fixed workflows (and graphs) on the same questions: which would have been best "
                 "per question, and what a perfect chooser would score", _headroom_options, headroom_command),
    "train": ("train a team: ppo (trainers/ppo_graph.py), sft (trainers/sft_graph.py), learn-check (the "
              "learning gate), recipe (examples/learning_recipe.py, in a checkout); `ragteam train ppo "
              "--help` shows each one's options", _train_options, train_command),
    "search": ("query a built index", _search_options, search_command),
}


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # ragteam never reaches a model hub at run time
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command][2](args)
    except (ValueError, FileNotFoundError, EngineError) as error:  # a clear message, no traceback
        print(f"ragteam {args.command}: {str(error)[:2000]}", file=sys.stderr)
        return 2
    except OSError as error:  # a path the system refuses (a folder, no permission, disk full)
        print(f"ragteam {args.command}: {refused(error)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
