"""The pre-registered PhantomWiki run in one command: its inputs, then the recipe.

    python examples/research/phantomwiki/phantomwiki_preregistered.py

1. ``runs/phantomwiki_prereg/inputs/``: the training questions typed by their wording
   (``phantomwiki_wording_types.py``), their template chains (``phantomwiki_chains.py``), and the
   dev subset fixed before the run: the first ``PER_HOP_COUNT`` questions of each hop count, in
   file order;
2. ``examples/learning_recipe.py --config jade_phantomwiki_preregistered.yaml --out
   runs/phantomwiki_prereg/run``: the untrained team and vanilla RAG on the dev subset, the
   exploration and the per-role fine-tune on training questions, the trained team and its
   adapters as each fixed workflow on the dev subset, the paired comparisons.

Every step skips what it finished, so rerunning the command resumes. ``--export DIR`` then
copies the trained adapters to DIR in bf16, their base model named by its offline spec (what
``docs/results/phantomwiki/`` holds; evaluate them with ``ragteam eval --policy adapters:DIR``).
``--ppo`` runs the PPO stage from those committed adapters
(``jade_phantomwiki_preregistered_ppo.yaml``) and then the trained team on the dev subset.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
DATA = ROOT.parent / "shared" / "data" / "phantomwiki"
RUN = ROOT / "runs" / "phantomwiki_prereg"
CONFIG = HERE / "jade_phantomwiki_preregistered.yaml"
PPO_CONFIG = HERE / "jade_phantomwiki_preregistered_ppo.yaml"
COMMITTED = ROOT / "docs" / "results" / "phantomwiki" / "adapters"
PER_HOP_COUNT = 25
BASE_MODEL = "offline:qwen2.5-coder-0.5b"


def first_per_hop_count(source: Path, target: Path, count: int) -> None:
    """The first ``count`` questions of each ``metadata.hops`` in ``source``'s order."""
    from ragteam.stores.jsonl import write_records

    kept, seen = [], {}
    for line in source.read_text(encoding="utf-8").splitlines():
        if line.strip():
            example = json.loads(line)
            hops = example["metadata"]["hops"]
            if seen.setdefault(hops, 0) < count:
                seen[hops] += 1
                kept.append(example)
    write_records(target, kept)  # whole or not at all: a rerun skips only a finished subset


def write_inputs(inputs: Path, data: Path) -> None:
    inputs.mkdir(parents=True, exist_ok=True)
    script = lambda name: [sys.executable, str(HERE / name)]  # noqa: E731
    train = ["--questions", str(data / "phantomwiki-train.jsonl")]
    steps = {"train_typed.jsonl": script("phantomwiki_wording_types.py") + train,
             "chains_train.jsonl": script("phantomwiki_chains.py") + train}
    for name, command in steps.items():
        if not (inputs / name).exists():
            subprocess.run(command + ["--out", str(inputs / name)], check=True)
    if not (inputs / "dev_subset.jsonl").exists():
        first_per_hop_count(data / "phantomwiki-dev.jsonl", inputs / "dev_subset.jsonl", PER_HOP_COUNT)


def export_bf16(adapters: Path, target: Path, base_model: str = BASE_MODEL) -> None:
    """The run's adapter folders, their weights in bf16, and a roles.json naming ``base_model``
    (the offline spec: no path of this machine; the tokenizer is the base model's, and the value
    head is not needed to serve)."""
    import torch
    from safetensors.torch import load_file, save_file

    if target.exists():
        raise SystemExit(f"phantomwiki_preregistered: {target} exists; give a new --export folder")
    roles = json.loads((adapters / "roles.json").read_text(encoding="utf-8"))
    partial = target.with_name(target.name + ".partial")
    partial.mkdir(parents=True)
    for name in roles["adapters"]:
        (partial / name).mkdir()
        config = json.loads((adapters / name / "adapter_config.json").read_text(encoding="utf-8"))
        config["base_model_name_or_path"] = base_model
        (partial / name / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        weights = load_file(adapters / name / "adapter_model.safetensors")
        save_file({k: v.to(torch.bfloat16).contiguous() for k, v in weights.items()},
                  partial / name / "adapter_model.safetensors")
    (partial / "roles.json").write_text(json.dumps({**roles, "base_model": base_model}, indent=2) + "\n",
                                        encoding="utf-8")
    partial.replace(target)


def ppo_then_dev(run: Path) -> int:
    """The PPO stage from the committed adapters, then its team on the dev subset (greedy, as the
    recipe evaluates), each skipped once finished."""
    relative = lambda path: str(path.relative_to(ROOT))  # noqa: E731
    if not (run / "ppo" / "adapters").is_dir():
        done = subprocess.run([sys.executable, "trainers/ppo_graph.py", "--config", relative(PPO_CONFIG),
                               "--data", relative(run / "inputs" / "train_typed.jsonl"),
                               "--index", relative(run / "run" / "index"), "--model", BASE_MODEL, "--seed", "0",
                               "--out", relative(run / "ppo"), "--resume", "--no-progress"], cwd=ROOT)
        if done.returncode:
            return done.returncode
    if (run / "ppo_dev" / "jade" / "predictions.jsonl").is_file():
        return 0
    ragteam = str(Path(sys.executable).with_name("ragteam"))
    team = f"adapters:{relative(run / 'ppo' / 'adapters')}"
    return subprocess.run([ragteam, "eval", "--graph", "jade", "--policy", team,
                           "--data", relative(run / "inputs" / "dev_subset.jsonl"),
                           "--index", relative(run / "run" / "index_eval"), "--sampler", "vllm", "--concurrency", "32",
                           "--seed", "0", "--temperature", "0", "--top-k", "3", "--fan-out", "5",
                           "--out", relative(run / "ppo_dev")], cwd=ROOT).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path, help="copy the trained adapters here (bf16) and stop")
    parser.add_argument("--ppo", action="store_true", help=f"the PPO stage from {COMMITTED.relative_to(ROOT)}, "
                        "then its team on the dev subset")
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: the recipe's setting on a 24 GB host
    if args.export:
        export_bf16(RUN / "run" / "round1" / "sft" / "adapters", args.export)
        return 0
    if args.ppo:
        return ppo_then_dev(RUN)
    write_inputs(RUN / "inputs", DATA)
    return subprocess.run([sys.executable, str(ROOT / "examples" / "learning_recipe.py"), "--config",
                           str(CONFIG.relative_to(ROOT)), "--out", str((RUN / "run").relative_to(ROOT)), "--no-ppo"],
                          cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
