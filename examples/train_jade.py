"""A documented learning run: JADE joint PPO on the dev sample, evaluated before and after on
held-out questions.

    python examples/train_jade.py [--minutes 30] [--out runs/learn_jade]

1. splits the bundled 53 HotpotQA dev questions: the first 35 train, the last 18 are held out;
2. ``ragteam eval`` of the untrained offline model on the held-out questions (greedy);
3. ``trainers/ppo_graph.py --config examples/jade_ppo.yaml`` for as many steps as fit in the
   time budget (resumable: rerunning continues from the last checkpoint);
4. ``ragteam eval`` of the trained model (``--policy hf:OUT/train/hf``) on the same held-out
   questions (into ``OUT/eval_after_stepN``);
5. prints F1 / EM / format violations before and after, and the reward curve's first and last
   steps (OUT/train/learning_curve.png shows the whole curve).

What earlier runs taught (and why format penalties are local rewards, see trainers/rewards.py):
with the −1 format penalty as an ordinary reward, GAE (γ = 1) also charged it to every earlier
call. A valid QDS plan led to sub-planner calls that broke their format, so the valid plan was
"punished" more than a broken one — a 16-step run learned to break the planner every time and
let the RA,AG fallback answer (held-out F1 11.9 → 22.2, planner valid 0/18), and a run without
the fallback collapsed to broken plans within 3 steps. Now the penalty reaches its own call only.

Measured with this config (16 steps × 8 questions, 30 min on 2 CPU cores, DeepSpeed ZeRO-2):
training reward −1.99 → +0.13, format-violation rate 1.00 → 0.00 (planner valid from step 5, AG
from step 8). The team then converged on the cheapest valid plan, a bare ``AG`` (no retrieval,
one round): held-out F1 11.9 → 6.6, EM 5.6 → 5.6, violations per run 2.22 → 0.00, retrievals
1.2 → 0. That is the paper's "degenerate to the minimal workflow" mode: at this model size a −1
format penalty outweighs every F1 difference, so the shortest prompt with the safest format wins.
With α = β = 0 (13 steps) the same drift happened (QDP at the root, bare AG for each part): held-
out F1 0.0 — the cost terms are not the cause. Smaller format penalties, several samples per
question (GRPO) and more steps are the next things to try.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN_SIZE = 35


def sh(*args: str) -> None:
    print("$ " + " ".join(args), flush=True)
    subprocess.run(args, check=True, cwd=ROOT)


def summary(folder: Path) -> dict:
    rows = [json.loads(line) for line in (folder / "jade" / "predictions.jsonl").read_text().splitlines()]
    n = len(rows)
    calls = sum(r["llm_calls"] for r in rows) if rows and "llm_calls" in rows[0] else None
    out = {"questions": n, "f1": sum(r["f1"] for r in rows) / n, "em": sum(r["em"] for r in rows) / n,
           "format_violations_per_run": sum(r["format_violations"] for r in rows) / n}
    if calls:
        out["format_violation_rate"] = sum(r["format_violations"] for r in rows) / calls
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0, help="training time budget")
    parser.add_argument("--out", default="runs/learn_jade")
    parser.add_argument("--config", default="examples/jade_ppo.yaml")
    parser.add_argument("--seconds-per-step", type=float, default=60.0,
                        help="measured cost of one step here (4 questions), to size the run")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)

    questions = (ROOT / "stores" / "data" / "hotpotqa_dev53_questions.jsonl").read_text().splitlines()
    heldout = out / "heldout.jsonl"
    heldout.write_text("\n".join(questions[TRAIN_SIZE:]) + "\n")
    python, ragteam = sys.executable, str(Path(sys.executable).with_name("ragteam"))

    if not (out / "eval_before" / "summary.md").exists():
        sh(ragteam, "eval", "--graph", "jade", "--data", str(heldout), "--policy", "offline",
           "--out", str(out / "eval_before"), "--concurrency", "8")
    steps = max(1, int(args.minutes * 60 // args.seconds_per_step))
    started = time.perf_counter()
    sh(python, "trainers/ppo_graph.py", "--config", args.config, "--out", str(out / "train"),
       "--steps", str(steps), "--resume", "--no-progress")
    train_minutes = (time.perf_counter() - started) / 60
    curve = [json.loads(line) for line in (out / "train" / "metrics.jsonl").read_text().splitlines()]
    after_dir = out / f"eval_after_step{len(curve)}"  # eval resumes by question: one folder per model
    sh(ragteam, "eval", "--graph", "jade", "--data", str(heldout), "--policy", f"hf:{out / 'train' / 'hf'}",
       "--out", str(after_dir), "--concurrency", "8")

    before, after = summary(out / "eval_before"), summary(after_dir)
    report = {"train_steps": len(curve), "train_minutes_this_invocation": round(train_minutes, 1),
              "held_out_before": before, "held_out_after": after,
              "first_steps": [{k: round(r[k], 3) for k in ("step", "reward", "f1", "format_violation_rate")}
                              for r in curve[:3]],
              "last_steps": [{k: round(r[k], 3) for k in ("step", "reward", "f1", "format_violation_rate")}
                             for r in curve[-3:]]}
    (out / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
