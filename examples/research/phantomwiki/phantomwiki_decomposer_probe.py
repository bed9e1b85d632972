"""How many sub-questions does the serial decomposer write, by hop count? The role's own request
(its instruction and its own 2-step example, ``nodes/roles/jade.py::QDS``) for the first N
PhantomWiki questions of each hop count whose answers are names, answered greedily by a Hugging
Face model; prints {hops: {sub-questions: questions}}. A decomposer that reads the hops from the
question writes more steps for more hops; one that copies its example writes two everywhere.

    python examples/research/phantomwiki/phantomwiki_decomposer_probe.py runs/pw/round1/sft/hf \\
        --data ../shared/data/phantomwiki/phantomwiki-dev.jsonl [--per-hops 10]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[3]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.nodes.roles.base import Observation  # noqa: E402
from ragteam.nodes.roles.jade import QDS  # noqa: E402
from ragteam.stores.datasets import read_dataset  # noqa: E402

SUB_QUESTION = re.compile(r"<q(\d+)>")


def chosen_questions(path: str, per_hops: int) -> list:
    """The first ``per_hops`` questions of each hop count whose gold answers are names."""
    by_hops = defaultdict(list)
    for example in read_dataset(path).examples:
        if not any(g.strip().isdigit() for g in example.golds):
            by_hops[str(example.metadata.get("type", "?"))].append(example)
    return [e for hops in sorted(by_hops) for e in by_hops[hops][:per_hops]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a Hugging Face model folder (e.g. a round's OUT/roundN/sft/hf)")
    parser.add_argument("--data", required=True, help="a PhantomWiki questions file")
    parser.add_argument("--per-hops", type=int, default=10)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.padding_side = "left"  # batched greedy decoding continues every prompt from its end
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    questions = chosen_questions(args.data, args.per_hops)
    counts = defaultdict(Counter)
    for start in range(0, len(questions), args.batch):
        batch = questions[start:start + args.batch]
        texts = [tokenizer.apply_chat_template(list(QDS.request(Observation(e.question)).messages),
                                               tokenize=False, add_generation_prompt=True) for e in batch]
        encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**encoded, max_new_tokens=QDS.max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
        for example, ids in zip(batch, out[:, encoded["input_ids"].shape[1]:]):
            reply = tokenizer.decode(ids, skip_special_tokens=True)
            counts[str(example.metadata.get("type", "?"))][len(set(SUB_QUESTION.findall(reply)))] += 1
    print(args.model, {hops: dict(sorted(c.items())) for hops, c in sorted(counts.items())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
