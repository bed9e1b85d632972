"""What the answer calls of a PhantomWiki PPO run said, step by step, and which way the PPO update
pushed each of them: the measurement behind "the answerer stopped naming people" in
docs/results/phantomwiki.md.

    python examples/research/phantomwiki/phantomwiki_answer_drift.py runs/pw/ppo [--by-workflow]

Reads the run's OUT/rollouts/step-NNNNNN.jsonl (``save_rollouts``). For each step and each
workflow a run was given (the first plan of the run: the planner's own choice or the one written
for it), the answer calls (AG, AS) that gave an answer: how many name a person (PhantomWiki's
people have a first and a last name), how many answer with the relation asked about instead
("mother", "friend of the friend of …"), and how many the update pushed up or down: a call
shares its run's standing, whose sign is that of the run's reward minus the mean reward of the
runs it is compared with. Plain GRPO compares every run of the question; with --by-workflow,
the runs given the same workflow (``grpo_by_workflow``, for every call but the first plan).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[3]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.nodes.parsing import tag_content  # noqa: E402
from ragteam.stores.jsonl import read_records  # noqa: E402

PERSON = re.compile(r"\b[A-Z][a-z]+ [A-Z][a-z]+")
RELATIONS = {"aunt", "brother", "child", "cousin", "daughter", "father", "friend", "friends",
             "grandchild", "grandparent", "hobby", "housewife", "husband", "man", "mother", "nephew",
             "niece", "occupation", "parent", "person", "sibling", "sister", "son", "spouse", "uncle",
             "wife", "woman"}
COLUMNS = ("answers", "naming a person", "relation words", "pushed up", "pushed down")


def kind_of(answer: str) -> str:
    """The answer's kind: "person" when it names one, "relation" when it gives relation words
    instead, else "other" (counts, dates, occupations…)."""
    if PERSON.search(answer):
        return "person"
    return "relation" if RELATIONS & set(re.findall(r"[a-z]+", answer.lower())) else "other"


def first_workflow(record: dict) -> str:
    return record["workflows"][0] if record["workflows"] else ""


def step_counts(records: list[dict], by_workflow: bool) -> dict[str, dict[str, int]]:
    """First workflow → the counts of ``COLUMNS`` over the answer calls of its runs."""
    compared: dict[tuple, list[float]] = defaultdict(list)

    def key(record: dict) -> tuple:
        return (record["question_id"], first_workflow(record) if by_workflow else "")

    for record in records:
        compared[key(record)].append(record["reward"])
    counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(COLUMNS, 0))
    for record in records:
        rewards = compared[key(record)]
        lead = record["reward"] - sum(rewards) / len(rewards)
        row = counts[first_workflow(record)]
        for call in record["calls"]:
            answer = tag_content(call["text"], "answer") if call["role"] in ("AG", "AS") else None
            if answer is None:
                continue
            kind = kind_of(answer)
            row["answers"] += 1
            row["naming a person"] += kind == "person"
            row["relation words"] += kind == "relation"
            row["pushed up"] += lead > 1e-9
            row["pushed down"] += lead < -1e-9
    return counts


def drift_table(run: Path, by_workflow: bool) -> str:
    """A markdown table: a row per step and first workflow, and the totals per workflow."""
    lines = ["| step | workflow | " + " | ".join(COLUMNS) + " |", "|---" * (2 + len(COLUMNS)) + "|"]
    totals: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(COLUMNS, 0))
    files = sorted((run / "rollouts").glob("step-*.jsonl"))
    if not files:
        raise SystemExit(f"{run / 'rollouts'}: no step-*.jsonl (the run needs save_rollouts)")
    for path in files:
        records = read_records(path)  # a bad line is named by file and line
        step = int(path.stem.removeprefix("step-"))
        for workflow, row in sorted(step_counts(records, by_workflow).items()):
            lines.append(f"| {step} | {workflow} | " + " | ".join(str(row[c]) for c in COLUMNS) + " |")
            for column in COLUMNS:
                totals[workflow][column] += row[column]
    for workflow, row in sorted(totals.items()):
        lines.append(f"| all | {workflow} | " + " | ".join(str(row[c]) for c in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a PPO run's folder (trainers/ppo_graph.py --out)")
    parser.add_argument("--by-workflow", action="store_true",
                        help="compare each run with the runs given the same workflow (grpo_by_workflow)")
    args = parser.parse_args(argv)
    print(drift_table(args.run, args.by_workflow))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
