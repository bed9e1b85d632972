"""The GPU-minded paths are exact against today's CPU ones: the HF engine's batched stop check
against the per-row one it replaced, and (further down) the learner's attention paths, the
BM25 path without chromadb, and the GPU scripts' dry runs."""

import random

import pytest
import torch

from ragteam.nodes.policies.hf import StopTokenIndex, _PerRowStop


class ReferenceStop:
    """The stopping criterion as it was before the batched one (row by row, ``int()`` of each
    row's last token, the decoded tail of every open row with stop strings): the reference."""

    def __init__(self, tokenizer, prompt_len, stops, budgets, eos_ids):
        self.tokenizer, self.prompt_len, self.stops, self.budgets, self.eos_ids = (
            tokenizer, prompt_len, stops, budgets, eos_ids)
        self.ends = [None] * len(stops)
        self.reasons = ["length"] * len(stops)
        self._tail = 8 + max((len(s) for row in stops for s in row), default=0)

    def __call__(self, input_ids, scores=None):
        done = []
        n_new = input_ids.shape[1] - self.prompt_len
        for row, ids in enumerate(input_ids):
            if self.ends[row] is None:
                last = int(ids[-1])
                if last in self.eos_ids:
                    self.ends[row], self.reasons[row] = n_new, "eos"
                elif self.stops[row] and self._hits_stop(ids, row):
                    self.ends[row], self.reasons[row] = n_new, "stop"
                elif n_new >= self.budgets[row]:
                    self.ends[row], self.reasons[row] = n_new, "length"
            done.append(self.ends[row] is not None)
        return torch.tensor(done)

    def _hits_stop(self, ids, row):
        tail = self.tokenizer.decode(ids[self.prompt_len:][-self._tail:].tolist(), skip_special_tokens=False)
        return any(stop in tail for stop in self.stops[row])


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from ragteam.nodes.policies.offline_model import ensure_offline_model

    return AutoTokenizer.from_pretrained(str(ensure_offline_model()))


@pytest.fixture(scope="module")
def stop_index(tokenizer):
    return StopTokenIndex(tokenizer)


# Text pieces that make stop strings appear across token boundaries, inside one token, in
# multi-byte characters split over byte tokens, and as special tokens.
PIECES = ["hello", " world", "</answer>", "</", "answer", ">", "答案", "é", "<|im_end|>", "\n\n", "Answer:",
          " ", "😀", "ü", "Zürich", "Question", ":", "\n", "the", ".", " n't", "a"]
STOPS = [(), ("</answer>",), ("\n\n", "Answer:"), ("答案",), ("😀",), ("é",), ("",), ("\ufffd",),
         ("<|im_end|>",), ("r:",), (" ",), ("ich",), ("Question:", "</answer>")]


def crafted_rows(tokenizer, rng, n_rows, length):
    rows = []
    for _ in range(n_rows):
        ids = []
        while len(ids) < length:
            if rng.random() < 0.2:  # raw ids too: byte tokens, rare pieces
                ids.append(rng.randrange(len(tokenizer)))
            else:
                ids += tokenizer.encode("".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 4))),
                                        add_special_tokens=False)
        rows.append(ids[:length])
    return rows


def run_criteria(tokenizer, stop_index, prompts, outputs, stops, budgets, eos_ids):
    """Feed both criteria the same growing batch, as ``generate`` does (a finished row's later
    tokens become padding); return (reference, batched) after checking every step's flags."""
    pad = 0
    width = len(prompts[0])
    old = ReferenceStop(tokenizer, width, stops, budgets, eos_ids)
    new = _PerRowStop(tokenizer, width, stops, budgets, eos_ids, stop_index)
    ids = torch.tensor(prompts)
    finished = torch.zeros(len(prompts), dtype=torch.bool)
    for step in range(len(outputs[0])):
        column = torch.tensor([row[step] for row in outputs])
        column = torch.where(finished, torch.full_like(column, pad), column)
        ids = torch.cat([ids, column.unsqueeze(1)], dim=1)
        done_old, done_new = old(ids), new(ids)
        assert torch.equal(done_old, done_new), step
        finished |= done_old
    return old, new


@pytest.mark.parametrize("seed", range(6))
def test_the_batched_stop_check_equals_the_per_row_one(tokenizer, stop_index, seed):
    rng = random.Random(seed)
    n_rows, length = 24, 40
    prompts = [[rng.randrange(len(tokenizer)) for _ in range(5)] for _ in range(n_rows)]
    outputs = crafted_rows(tokenizer, rng, n_rows, length)
    stops = [rng.choice(STOPS) for _ in range(n_rows)]
    budgets = [rng.randrange(1, length + 1) for _ in range(n_rows)]
    eos_ids = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")}
    old, new = run_criteria(tokenizer, stop_index, prompts, outputs, stops, budgets, eos_ids)
    assert new.ends == old.ends and new.reasons == old.reasons
    assert {"stop", "eos", "length"} <= set(old.reasons)  # the crafted rows exercise every reason


def test_stop_strings_split_across_tokens_and_bytes_are_found_where_the_full_decode_finds_them(tokenizer, stop_index):
    texts = ["The answer is Paris</answer> and more", "x 答案 y", "ok 😀 done", "Zürich", "a\n\nb", "ab r: c"]
    stops = [("</answer>",), ("答案",), ("😀",), ("ich",), ("\n\n",), ("r:",)]
    outputs = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    length = max(map(len, outputs))
    outputs = [o + [tokenizer.encode(" z", add_special_tokens=False)[0]] * (length - len(o)) for o in outputs]
    prompts = [[1, 2, 3]] * len(texts)
    old, new = run_criteria(tokenizer, stop_index, prompts, outputs, stops, [length] * len(texts), {2})
    assert new.reasons == old.reasons == ["stop"] * len(texts)
    assert new.ends == old.ends


def test_only_rows_whose_newest_token_can_end_a_stop_string_are_decoded(tokenizer, stop_index):
    table = stop_index.candidates(("</answer>",))
    assert table[tokenizer.convert_tokens_to_ids(">")] and not table[tokenizer.encode(" world")[0]]
    assert 0 < int(table.sum()) < len(tokenizer) // 50  # the check decodes almost nothing


def test_without_stop_strings_the_check_never_reads_the_device(tokenizer):
    # On the meta device any read of a value (int(), .tolist(), .cpu()) raises: the whole check
    # must stay tensor ops on the model's device, so a GPU never waits on the host.
    stopper = _PerRowStop(tokenizer, 3, [()] * 4, [2, 3, 4, 5], {2}, device="meta")
    for n in range(4, 9):
        done = stopper(torch.zeros(4, n, dtype=torch.long, device="meta"))
        assert done.device.type == "meta" and done.dtype == torch.bool


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")
def test_on_cuda_a_step_with_stop_strings_syncs_at_most_once(tokenizer, stop_index):
    import warnings

    stops = [("</answer>",), ()] * 8
    stopper = _PerRowStop(tokenizer, 3, stops, [30] * 16, {2}, stop_index, device="cuda")
    ids = torch.randint(100, 1000, (16, 10), device="cuda")
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stopper(ids)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert sum("synchroniz" in str(w.message) for w in caught) <= 1


# -- BM25 without chromadb ---------------------------------------------------------------------

NO_CHROMA = r'''
import sys
sys.modules["chromadb"] = None  # any `import chromadb` (or of a submodule) now raises ImportError
from pathlib import Path
from ragteam.graphs.apps.cli import main
from ragteam.stores.index import build_index, open_index
from ragteam.trainers.config import TrainConfig
from ragteam.trainers.loop import Trainer

out, model = Path(sys.argv[1]), sys.argv[2]
build_index(["stores/data/hotpotqa_dev53_corpus.jsonl"], "bm25", out / "index")
hits = open_index(out / "index").search("Ed Wood film director", 3)
assert hits and "Ed Wood" in hits[0].title, hits
assert main(["run", "--policy", "scripted", "--index", str(out / "index"), "Who directed Ed Wood?"]) == 0
trainer = Trainer(TrainConfig(graph="jade", model=model, index=str(out / "index"), out=str(out / "run"),
                              steps=1, questions_per_step=1, samples_per_question=2, concurrency=2,
                              optimizer="torch", export_hf=False, max_rounds=1), progress=False)
try:
    metrics = trainer.train_step()
finally:
    trainer.close()
assert metrics["trained_transitions"] > 0, metrics
print("chromadb imported:", [m for m in sys.modules if m.startswith("chromadb") and sys.modules[m] is not None])
'''


def test_a_bm25_index_and_training_on_it_never_import_chromadb(tiny_model_dir, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", NO_CHROMA, str(tmp_path), tiny_model_dir], cwd=root,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "chromadb imported: []" in done.stdout


# -- the learner's GPU attention, checked on the CPU ------------------------------------------

def reference_packed_mask(segment_of, owner):
    """The packed mask as ``pack_batch`` built it before ``may_attend`` (the reference)."""
    width = segment_of.shape[1]
    same_segment = (segment_of.unsqueeze(2) == segment_of.unsqueeze(1)) & (segment_of.unsqueeze(2) >= 0)
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    visible = (owner.unsqueeze(1) == 0) | (owner.unsqueeze(1) == owner.unsqueeze(2))
    return (same_segment & causal & visible) | torch.eye(width, dtype=torch.bool)


def packed(items, row_tokens=2048):
    from ragteam.trainers.learner.batches import pack_batch

    return pack_batch([e.prompt_ids for e in items], [e.completion_ids for e in items],
                      [e.temperature for e in items], 0, row_tokens=row_tokens)


@pytest.mark.parametrize("row_tokens", [2048, 40])  # one row, and several rows with padding
def test_the_block_mask_lets_exactly_the_packed_masks_positions_attend(row_tokens):
    from torch.nn.attention.flex_attention import create_mask

    from tests.test_shared_prompts import buffer
    from ragteam.trainers.learner.attention import segment_block_mask
    from ragteam.trainers.learner.batches import may_attend

    batch = packed(buffer(), row_tokens)
    dense = batch.attention_mask[:, 0]
    assert torch.equal(dense, reference_packed_mask(batch.segments, batch.owners))
    rows, width = batch.segments.shape
    segments, owners = batch.segments, batch.owners
    rule = create_mask(lambda b, h, q, k: may_attend(segments[b, q], segments[b, k], owners[b, q], owners[b, k], q, k),
                       rows, 1, width, width, device="cpu")
    assert torch.equal(rule[:, 0], dense)
    # block level: a block is skipped only when no pair in it may attend, marked full only when all may
    block_mask = segment_block_mask(batch)
    size = block_mask.BLOCK_SIZE[0]
    blocks = -(-width // size)
    padded = torch.zeros(rows, blocks * size, blocks * size, dtype=torch.bool)
    padded[:, :width, :width] = dense
    tiles = padded.view(rows, blocks, size, blocks, size)
    assert torch.equal(block_mask.to_dense()[:, 0].bool(), tiles.any(dim=(2, 4)))


def test_rows_for_a_block_kernel_are_padded_to_its_block_and_carry_no_dense_mask():
    from tests.test_shared_prompts import buffer
    from ragteam.trainers.learner.batches import pack_batch

    items = buffer()
    args = ([e.prompt_ids for e in items], [e.completion_ids for e in items], [e.temperature for e in items], 0)
    dense, blocked = pack_batch(*args, row_tokens=40), pack_batch(*args, row_tokens=40, block=128)
    rows, width = dense.input_ids.shape
    assert blocked.attention_mask is None and blocked.input_ids.shape == (rows, 128 * -(-width // 128))
    assert torch.equal(blocked.input_ids[:, :width], dense.input_ids)
    assert torch.equal(blocked.segments[:, :width], dense.segments)
    assert (blocked.segments[:, width:] == -1).all()  # the added columns are padding
    for name in ("rows", "predict_at", "state_at", "completion_ids", "completion_mask"):
        assert torch.equal(getattr(blocked, name), getattr(dense, name)), name


@pytest.fixture(scope="module", params=[(4, 2), (6, 2)], ids=["gqa", "gqa-heads-not-power-of-two"])
def gpu_attention_models(request, tiny_model_dir):
    """(today's SDPA model, the same weights under the GPU attention), on the CPU."""
    import copy

    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from ragteam.trainers.learner.attention import NAME, use_gpu_attention
    from ragteam.trainers.learner.model import PolicyValueModel

    heads, kv = request.param  # head dim 8: under the fused kernel's 16, so the zero-padding runs too
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=8 * heads, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=4096,
                         tie_word_embeddings=True, attn_implementation="sdpa")
    today = PolicyValueModel(LlamaForCausalLM(config))
    torch.nn.init.normal_(today.value_head.weight, std=0.1)  # a non-zero critic: values are compared too
    flex = copy.deepcopy(today)
    assert use_gpu_attention(flex.lm) and flex.lm.config._attn_implementation == NAME
    return today, flex


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_packed_rows_under_flex_attention_give_todays_log_probs_and_values(gpu_attention_models):
    # forward only: this torch's FlexAttention has no backward on a CPU (its GPU kernel does)
    from tests.test_shared_prompts import buffer
    from ragteam.trainers.learner.ppo_update import forward_items

    items = buffer()
    with torch.no_grad():
        (_, lp0, v0), (_, lp1, v1) = (forward_items(m.eval(), items, 0, True) for m in gpu_attention_models)
    assert torch.allclose(lp0, lp1, atol=1e-5) and torch.allclose(v0, v1, atol=1e-5)


def test_padded_rows_without_a_mask_give_todays_loss_and_gradients(gpu_attention_models):
    from collections import defaultdict

    from tests.test_shared_prompts import buffer
    from ragteam.trainers.algorithms.ppo import ppo_loss
    from ragteam.trainers.algorithms.settings import PPOSettings
    from ragteam.trainers.learner.ppo_update import forward_items

    items = buffer()
    results = []
    for model in gpu_attention_models:
        model.train().zero_grad(set_to_none=True)
        loss = ppo_loss(PPOSettings(kl_coef=0.0), defaultdict(list))(items, forward_items(model, items, 0, False))
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (loss0, grads0), (loss1, grads1) = results
    assert torch.allclose(loss0, loss1, atol=1e-6) and grads0.keys() == grads1.keys()
    for name in grads0:
        assert torch.allclose(grads0[name], grads1[name], atol=1e-5), name


def test_on_a_cpu_the_learner_runs_sdpa_over_grouped_heads_with_the_same_outputs(tiny_model_dir):
    """SDPA reading grouped KV heads in place (no copy per head under a mask): the same outputs
    as transformers' own SDPA on a packed batch."""
    from transformers import AutoModelForCausalLM

    from ragteam.nodes.policies.grouped_attention import NAME
    from ragteam.trainers.learner.batches import pack_batch
    from ragteam.trainers.learner.model import apply_liger, load_lm

    lm, _ = load_lm(tiny_model_dir)
    assert lm.config._attn_implementation == NAME
    assert apply_liger(lm) is False  # Triton kernels never patch a CPU model, installed or not
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    batch = pack_batch([[5, 6, 7, 8], [5, 6, 9]], [[3, 4], [2]], [1.0, 1.0], 0)
    inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask,
              "position_ids": batch.position_ids}
    with torch.no_grad():
        assert torch.allclose(lm(**inputs).logits, plain(**inputs).logits, atol=1e-5)


def test_liger_patches_only_the_loaded_model_and_rope_only_on_cuda_tensors(tiny_model_dir):
    """Liger swaps classes and the RoPE function in the modeling module; a fake patcher doing the
    same shows the swaps undone (later CPU models keep transformers' layers) and RoPE a switch."""
    from transformers import AutoModelForCausalLM
    from transformers.models.llama import modeling_llama

    from ragteam.trainers.learner.model import _patch_instance_only

    plain_rope, plain_norm = modeling_llama.apply_rotary_pos_emb, modeling_llama.LlamaRMSNorm
    calls = []

    def fused_rope(q, k, *args, **kwargs):
        calls.append("fused")
        return plain_rope(q, k, *args, **kwargs)

    def fake_liger(model, **options):
        assert options["rope"] and not options["fused_linear_cross_entropy"] and not options["cross_entropy"]
        modeling_llama.apply_rotary_pos_emb = fused_rope
        modeling_llama.LlamaRMSNorm = type("FusedNorm", (torch.nn.Module,), {})
        model.patched = True

    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    try:
        assert _patch_instance_only(lm, fake_liger) and lm.patched
        assert modeling_llama.LlamaRMSNorm is plain_norm
        switch = modeling_llama.apply_rotary_pos_emb
        assert switch is not fused_rope and switch.plain is plain_rope
        with torch.no_grad():
            lm(torch.tensor([[5, 6, 7]]))
        assert calls == []  # CPU tensors never reach the Triton kernel
    finally:
        modeling_llama.apply_rotary_pos_emb = plain_rope


# -- the GPU scripts, at toy size on the CPU -----------------------------------------------------

def run_script(args, timeout=600):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})


def test_bench_learner_prints_each_phase_and_the_ratio(tiny_model_dir):
    import re

    done = run_script(["benchmarks/bench_learner.py", "--model", tiny_model_dir, "--device", "cpu", "--groups", "1",
                       "--samples", "2", "--prompt-tokens", "24", "--answer-prompt-tokens", "16",
                       "--completion-tokens", "4", "--minibatch", "4", "--warmup", "0", "--profile", "3"])
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    for phase in ("bare loop", "learner, shared", "learner, padded"):
        row = next(line for line in lines if line.startswith(phase + " "))
        assert re.search(r"sdpa\s+[\d.]+\s+\d+\s+\d+\s+\d+\s+-\s+-?\d+$", row), row  # CPU: no MFU
        assert any(line.startswith(f"--- profile of {phase}: ") for line in lines), phase
    assert sum("aten::" in line for line in lines) >= 3  # each profile's top operators
    assert re.fullmatch(r"learner vs bare loop: \d+\.\d\d", lines[-1]), lines[-1]


def test_bench_packing_times_both_layouts_on_each_buffer():
    import re

    done = run_script(["benchmarks/bench_packing.py", "--repeats", "1"])
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    for name in ("gpu-bench", "short answers"):
        row = next(line for line in lines if line.startswith(name))
        assert re.search(r"\s\d+\s+\d+\.\d{3}\s+\d+\.\d{3}\s+\d+\.\d$", row), row
    assert re.fullmatch(r"block layout vs dense mask: \d+\.\d", lines[-1]), lines[-1]


def test_a_random_model_of_a_named_shape_loads_with_its_tokenizer_and_never_overwrites(tmp_path):
    from ragteam.trainers.learner.model import load_lm

    out = tmp_path / "tiny"
    done = run_script(["benchmarks/random_model.py", "--shape", "tiny", "--out", str(out)])
    assert done.returncode == 0, done.stderr[-3000:]
    lm, tokenizer = load_lm(str(out))
    assert (lm.config.num_hidden_layers, lm.config.hidden_size) == (2, 64)
    assert tokenizer("Paris").input_ids and tokenizer.eos_token_id is not None
    again = run_script(["benchmarks/random_model.py", "--shape", "tiny", "--out", str(out)])
    assert again.returncode == 2 and "exists" in again.stderr


def test_gpu_wheels_falls_back_to_torchs_range_when_the_pinned_torch_does_not_resolve(tmp_path, monkeypatch, capsys):
    import subprocess

    from ragteam.trainers import gpu_wheels

    asked = []

    def resolve(requirements, args):
        asked.append([r for r in requirements if r.startswith("torch")])
        if len(asked) == 1:  # a mirror without torch 2.11's pinned CUDA libraries
            raise subprocess.CalledProcessError(1, ["pip"])
        return [{"name": "langgraph", "version": "1.0", "requires": []}]

    monkeypatch.setattr(gpu_wheels, "build_deepspeed", lambda spec, dest: dest / "deepspeed-0-py3-none-any.whl")
    monkeypatch.setattr(gpu_wheels, "wheel_requirements", lambda wheel: [])
    monkeypatch.setattr(gpu_wheels, "resolve", resolve)
    monkeypatch.setattr(gpu_wheels, "pip", lambda *a, **k: "")
    assert gpu_wheels.main(["--dest", str(tmp_path / "w"), "--torch-version", "2.11.0"]) == 0
    torch_range = gpu_wheels.requirement_list(["torch"], gpu_wheels.pinned_in_pyproject(["torch"]))[0]
    assert asked == [["torch==2.11.0"], [torch_range]] and torch_range != "torch"  # then the pyproject's range
    assert "do not resolve on this index" in capsys.readouterr().err


def test_gpu_wheels_dry_run_lists_the_packages_and_the_offline_install():
    done = run_script(["trainers/gpu_wheels.py", "--dry-run", "--dest", "/tmp/ragteam-wheels", "--python-version", "3.12"])
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for package in ("langgraph", "langchain-core", "pydantic", "bm25s", "PyStemmer", "gguf", "graphviz", "hjson",
                    "deepspeed", "liger-kernel"):
        assert package in out.splitlines()[0], package
    assert "DS_BUILD_OPS=0" in out and "--python-version 3.12" in out
    assert "pip install --no-index --find-links /tmp/ragteam-wheels" in out
    assert "torch" in out.splitlines()[1] and "transformers" in out.splitlines()[1]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")
def test_on_cuda_packed_rows_take_flex_attention_and_equal_the_padded_update(tiny_model_dir):
    from collections import defaultdict

    from tests.test_shared_prompts import buffer
    from ragteam.trainers.algorithms.ppo import ppo_loss
    from ragteam.trainers.algorithms.settings import PPOSettings
    from ragteam.trainers.learner.ppo_update import forward_items
    from ragteam.trainers.learner.attention import NAME
    from ragteam.trainers.learner.model import PolicyValueModel, load_lm

    lm, _ = load_lm(tiny_model_dir, device="cuda")
    assert lm.config._attn_implementation == NAME
    model = PolicyValueModel(lm).train()
    items = buffer()
    results = []
    for share in (True, False):
        model.zero_grad(set_to_none=True)
        loss = ppo_loss(PPOSettings(kl_coef=0.0), defaultdict(list))(items, forward_items(model, items, 0, share))
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (shared_loss, shared_grads), (padded_loss, padded_grads) = results
    assert torch.allclose(shared_loss, padded_loss, atol=1e-5)
    for name, grad in padded_grads.items():
        assert torch.allclose(shared_grads[name], grad, atol=1e-4), name
