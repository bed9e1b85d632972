"""A model folder with random weights of a known shape and a real tokenizer, for benchmarks and
checks on a machine that cannot reach a model hub (an air-gapped GPU node): speed and memory
depend on the shape, not on the weights.

    python benchmarks/random_model.py --shape smollm2-1.7b --out /tmp/m17b [--tokenizer DIR] [--device cuda]
    make gpu-bench MODEL=/tmp/m17b

``--tokenizer``: a folder with the tokenizer and a Llama ``config.json`` to start from (default:
the offline SmolLM2-135M, converted once). Shapes: ``SHAPES`` below; weights are saved in the
shape's dtype.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

# name: (config overrides, dtype). The 1.7B is SmolLM2-1.7B's shape (24 layers, hidden 2048,
# MLP 8192, 32 heads, tied embeddings), the scale of the figures in docs/gpu.md.
SHAPES = {
    "smollm2-135m": ({}, torch.float32),
    "smollm2-1.7b": ({"num_hidden_layers": 24, "hidden_size": 2048, "intermediate_size": 8192,
                      "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 64}, torch.bfloat16),
    "tiny": ({"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}, torch.float32),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json")


def build(out: Path, tokenizer: Path, overrides: dict, dtype: torch.dtype, device: str = "cpu",
          seed: int = 0) -> int:
    """A random Llama: ``tokenizer``'s config with ``overrides``, saved with that tokenizer's
    files as an exported model of ragteam's (``written_whole``: whole or not at all). Returns
    the parameter count."""
    from transformers import AutoConfig, LlamaForCausalLM

    from ragteam.trainers.learner.checkpoint import written_whole

    config = AutoConfig.from_pretrained(tokenizer)
    config.update(overrides)
    torch.manual_seed(seed)
    with torch.device(device):  # initializing on a GPU takes seconds where a CPU takes minutes
        model = LlamaForCausalLM(config).to(dtype)
    with written_whole(out) as partial:
        model.save_pretrained(partial)
        for name in TOKENIZER_FILES:
            if (tokenizer / name).exists():
                shutil.copy(tokenizer / name, partial / name)
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), required=True)
    parser.add_argument("--out", type=Path, required=True, help="a new folder (never an existing one)")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer + Llama config folder (default: offline SmolLM2)")
    parser.add_argument("--device", default="cpu", help="where to initialize the weights (cuda is faster)")
    args = parser.parse_args(argv)
    if args.out.exists():
        print(f"random_model: {args.out} exists; give a new folder", file=sys.stderr)
        return 2
    if args.tokenizer is None:
        from ragteam.nodes.policies.offline_model import ensure_offline_model

        args.tokenizer = ensure_offline_model()
    count = build(args.out, args.tokenizer, *SHAPES[args.shape], device=args.device)
    print(f"{args.out}: {args.shape}, {count / 1e9:.3f}B parameters, random weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
