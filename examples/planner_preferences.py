"""How strongly a planner prefers each workflow, question by question: the model's log-probability
of each whole reply ``<workflow>W</workflow>`` on the planner prompts an evaluation recorded, by
question type. Greedy picks say only which workflow wins; these scores also say by how much, so
a planner that writes ``RA,AG`` everywhere but leans towards ``QDS`` on 4-hop questions shows it.

    python examples/planner_preferences.py --run runs/pw/eval_before/jade \\
        --policy hf:runs/pw/round1/sft/hf [--data DEV.jsonl] [--limit 40] \\
        [--workflow RA,AG --workflow QDS ...] [--out prefs.jsonl]

``--run`` is one graph's folder of a ``ragteam eval`` (its predictions.jsonl and traces); the
prompt of each question's first plan (task 0) is scored as recorded, token for token. ``--policy``
is a model policy as ``ragteam eval`` takes it (``hf:DIR``, ``offline:NAME``, or ``adapters:DIR``,
a per-role export, whose planner adapter is then active), loaded on the HF engine. Prints, by
question type, how often each workflow scores highest and its mean share of the probability over
the workflows scored; ``--out`` keeps the per-question scores.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from collections import Counter, defaultdict
from contextlib import nullcontext
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[1]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.graphs.apps.progress import Progress, add_progress_options, progress_mode  # noqa: E402
from ragteam.graphs.eval.headroom import question_types  # noqa: E402
from ragteam.nodes.roles.jade import workflow_reply  # noqa: E402
from ragteam.stores.datasets import read_dataset  # noqa: E402
from ragteam.stores.jsonl import read_records  # noqa: E402
from ragteam.stores.owned import write_text  # noqa: E402

WORKFLOWS = ("RA,AG", "RA,DS,AG", "QDS", "QDP", "AG")


def first_plan_prompts(run: Path, limit: int | None = None) -> list[tuple[str, list[int]]]:
    """(question id, prompt ids) of each question's first planner call (task 0), in the order of
    the run's predictions; questions whose trace has none (a fixed workflow's run) are skipped."""
    prompts = []
    for record in read_records(run / "predictions.jsonl"):
        trace = run.parent / record["trace_path"]  # relative to the evaluation's folder
        first = next((call for call in read_records(trace)
                      if call["role"] == "planner" and call["task_id"] == "0" and call["prompt_ids"]), None)
        if first is not None:
            prompts.append((record["id"], first["prompt_ids"]))
        if limit is not None and len(prompts) == limit:
            break
    return prompts


def reply_logprobs(lm, prompt_ids: list[int], replies: dict[str, list[int]]) -> dict[str, float]:
    """log p(reply | prompt) for each reply (ids), summed over its tokens; the prompt's forward
    pass is run once and its cache reused for every reply."""
    import torch

    with torch.no_grad():
        prefix = lm(input_ids=torch.tensor([prompt_ids], device=lm.device), use_cache=True)
        first = torch.log_softmax(prefix.logits[0, -1].float(), -1)
        scores = {}
        for name, ids in replies.items():
            rest = lm(input_ids=torch.tensor([ids[:-1]], device=lm.device),
                      past_key_values=copy.deepcopy(prefix.past_key_values))
            logp = torch.log_softmax(rest.logits[0].float(), -1)
            scores[name] = first[ids[0]].item() + sum(logp[i, ids[i + 1]].item() for i in range(len(ids) - 1))
    return scores


def shares(scores: dict[str, float]) -> dict[str, float]:
    """Each workflow's share of the probability over the workflows scored (a softmax of the
    sequence log-probabilities)."""
    top = max(scores.values())
    weights = {name: math.exp(value - top) for name, value in scores.items()}
    total = sum(weights.values())
    return {name: weight / total for name, weight in weights.items()}


def by_type_table(rows: list[dict], workflows: list[str]) -> str:
    """Markdown: per question type, how often each workflow scores highest and its mean share."""
    grouped = defaultdict(list)
    for row in rows:
        grouped[row["type"]].append(row)
    head = "| type | n | " + " | ".join(f"{w.replace('|', chr(92) + '|')} top / share" for w in workflows) + " |"
    lines = [head, "|---|---|" + "---|" * len(workflows)]
    for qtype, group in sorted(grouped.items()):
        tops = Counter(row["top"] for row in group)
        cells = [f"{tops[w]} / {sum(row['share'][w] for row in group) / len(group):.2f}" for w in workflows]
        lines.append(f"| {qtype} | {len(group)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def load_planner(spec: str):
    """(lm, tokenizer, a context in which the planner's weights are active) of the policy
    ``spec`` sampled by HF generate: a per-role export's planner adapter, else the model itself."""
    from ragteam.nodes.policies.spec import load_policy

    policy = load_policy(spec, sampler="hf")
    if policy.adapters is None:
        return policy.model, policy.tokenizer, nullcontext()
    adapters = policy.adapters
    return policy.model, policy.tokenizer, adapters.active(policy.model, adapters.adapter_of("planner"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, type=Path, help="one graph's folder of a ragteam eval")
    parser.add_argument("--policy", required=True,
                        help="the planner's model: hf:DIR, offline:NAME or adapters:DIR (a per-role export)")
    parser.add_argument("--data", help="the evaluated dataset, for question types (metadata.type)")
    parser.add_argument("--workflow", action="append", help=f"a workflow to score (default: {', '.join(WORKFLOWS)})")
    parser.add_argument("--limit", type=int, help="score the first N questions only")
    parser.add_argument("--out", type=Path, help="write the per-question scores here (JSONL); never overwritten")
    add_progress_options(parser)
    args = parser.parse_args(argv)
    if args.out is not None and args.out.exists():
        parser.error(f"{args.out} exists; name a new file")
    workflows = args.workflow or list(WORKFLOWS)
    prompts = first_plan_prompts(args.run, args.limit)
    if not prompts:
        parser.error(f"{args.run}: no first plan recorded in its traces")
    types = question_types(read_dataset(args.data).examples) if args.data else {}

    lm, tokenizer, planner_weights = load_planner(args.policy)
    replies = {w: tokenizer.encode(workflow_reply(w), add_special_tokens=False) for w in workflows}
    rows = []
    # a 0.5B model on two CPU cores scores ~10 questions a minute: a long job, shown as one
    progress = Progress(len(prompts), "first plans scored", "q", progress_mode(args))
    with planner_weights:
        for qid, prompt_ids in prompts:
            scores = reply_logprobs(lm, prompt_ids, replies)
            rows.append({"id": qid, "type": types.get(qid, "all"), "logprob": scores, "share": shares(scores),
                         "top": max(scores, key=scores.get)})
            progress.update()
    progress.close()
    if args.out is not None:
        write_text(args.out, "".join(json.dumps(row) + "\n" for row in rows))
    print(f"{len(rows)} first plans of {args.run}; top: the workflow whose whole reply scored highest "
          "(greedy decoding, token by token, can write another), share: its mean share of the "
          "probability over the workflows scored\n")
    print(by_type_table(rows, workflows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
