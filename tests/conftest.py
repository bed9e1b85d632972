import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("RAGTEAM_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".cache" / "ragteam"))
# Every vLLM engine a test starts (here or in a subprocess) reserves 1 GiB of CPU KV cache, ~23k
# tokens of the offline model, far more than a test's calls hold; the 4 GiB default costs ~20 s
# more per engine start on this machine (measured beside other work: 48 vs 68 s).
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from ragteam.nodes.context import RunContext, Settings  # noqa: E402
from ragteam.nodes.policies.scripted import ScriptedPolicy  # noqa: E402
from ragteam.nodes.team import Team  # noqa: E402
from ragteam.stores.demo import demo_retriever  # noqa: E402


def pytest_configure(config):
    """Each pytest-xdist worker (``make test``'s and ``make test-fast``'s two) keeps its own share
    of the cores, and so does every process it starts (engines, Ray, subprocesses inherit it):
    two heavy tests side by side then cannot oversubscribe a core. Unpinned, vLLM binds its
    OpenMP threads to every core it may use, and one heavy test beside another slowed down up to
    5× (the Ray LoRA test: 92 s alone, 8 minutes beside another worker's real-model tests), so
    the heavy modules used to run one after another in one lane: 26-29 min for ``make test``,
    against 17 min with both lanes pinned and dealt heavy modules."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    import torch

    from ragteam.trainers.backends.ray import shards

    workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    cpus = sorted(os.sched_getaffinity(0))
    if workers > len(cpus):
        return
    mine = shards(cpus, workers)[int(worker.removeprefix("gw"))]
    os.sched_setaffinity(0, mine)
    os.environ["OMP_NUM_THREADS"] = str(len(mine))
    torch.set_num_threads(len(mine))


# Memory, sampled each second through full ``make test`` runs on the 23.5 GB host: the Ray module
# (two vLLM rollout workers and two DeepSpeed learner ranks) holds ~15 GB at its peak, a module
# that starts its own engine or trains the real model 3-8 GB more, and beside each other they
# reached 21.0-23.4 GB, past the 95% at which Ray's memory monitor kills an actor (a learner killed
# so fails every Ray test after it: measured here, and the likeliest cause of a CI run that failed
# the same way). The two never run at the same time: the Ray module holds the memory turn alone,
# the engine modules share it, and the order below gives the other lane every other module while
# the Ray module runs first. test_offline_model and test_examples (the offline model on
# transformers, no engine: 1.7 and 1.9 GB alone) run beside it: in a full run with a per-test
# timeline, used memory stayed at 18.0 GB at most while they did; that run's peak, 21.0 GB (89%),
# was the killed-worker test beside test_gpu_paths, which ran beside the Ray module before too.
RAY_MODULE = "test_ray_backend.py"
ENGINE_MODULES = ["test_vllm.py", "test_train_scripts.py", "test_weight_channel.py",
                  "test_adapters_vllm.py"]  # longest first (a full run: 339, 217, 106, 70 s)


def pytest_collection_modifyitems(items):
    """The Ray module first, then the modules that start no engine (those with slow tests
    first), then the engine modules, longest first, so that the lanes end together; each
    module's tests in their own order (a stable sort). The order decides no result."""
    def module(item) -> str:
        return item.nodeid.split("::", 1)[0].removeprefix("tests/")

    slow = {module(item) for item in items
            if item.get_closest_marker("slow") or item.get_closest_marker("distributed")}

    def order(item) -> tuple[int, int]:
        name = module(item)
        if name == RAY_MODULE:
            return 0, 0
        if name in ENGINE_MODULES:
            return 2, ENGINE_MODULES.index(name)
        return 1, name not in slow

    items.sort(key=order)


@pytest.fixture(scope="module", autouse=True)
def memory_turn(request, tmp_path_factory):
    """Under pytest-xdist, the Ray module takes an exclusive lock for as long as it runs and each
    engine module a shared one (a file lock in the run's temporary folder, which its workers share
    and pytest prunes): see the note above."""
    name = Path(str(request.node.path)).name
    if not hasattr(request.config, "workerinput") or (name != RAY_MODULE and name not in ENGINE_MODULES):
        yield
        return
    import fcntl

    lock = tmp_path_factory.getbasetemp().parent / "memory.lock"  # basetemp: the run's folder/popen-gwN
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if name == RAY_MODULE else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# a scripted team that plans RA,AG and answers "yes": an eval or run with no model
SIMPLE = {"planner": "<workflow>RA,AG</workflow>", "AG": "<answer>yes</answer>"}


@pytest.fixture
def corpus(tmp_path):
    """A two-document JSON-lines corpus with titles (test_store_inputs.py has its own, without)."""
    from ragteam.stores.jsonl import write_records

    path = tmp_path / "corpus.jsonl"
    write_records(path, [{"id": "a", "title": "Paris", "text": "Paris is the capital of France."},
                         {"id": "b", "title": "Rome", "text": "Rome is the capital of Italy."}])
    return path


@pytest.fixture
def make_ctx():
    def factory(rules, retriever=None, **settings):
        policy = rules if not isinstance(rules, dict) else ScriptedPolicy(rules)
        return RunContext(Team(policy), retriever or demo_retriever(), Settings(**settings))
    return factory


@pytest.fixture(scope="session")
def offline_policy():
    from ragteam.nodes.policies.spec import load_policy
    return load_policy("offline")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A 2-layer random Llama with the offline model's tokenizer: the trainer's mechanics in seconds."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from ragteam.nodes.policies.offline_model import ensure_offline_model

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_offline_model()))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.bos_token_id, tie_word_embeddings=True)
    folder = tmp_path_factory.mktemp("tiny-lm")
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def experience(prompt_ids, completion_ids, *, trajectory="t", group="q", role="AG", old_logprobs=(),
               temperature=1.0, reward=0.0, **fields):
    """A ``trainers.experience.Experience`` for a test: the ids it is about, the rest by keyword
    (run "t", question "q", role AG, no behaviour log-probs, T = 1, reward 0 unless given)."""
    from ragteam.trainers.experience import Experience

    return Experience(trajectory=trajectory, group=group, role=role, prompt_ids=list(prompt_ids),
                      completion_ids=list(completion_ids), old_logprobs=list(old_logprobs),
                      temperature=temperature, reward=reward, **fields)


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_up(url: str, process, timeout_s: float, what: str) -> None:
    """Poll ``url`` until it answers; fail (and stop ``process``) if it dies or takes too long."""
    import time
    import urllib.request

    import pytest

    deadline = time.time() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            if time.time() > deadline or process.poll() is not None:
                process.terminate()
                pytest.fail(f"{what} did not start")
            time.sleep(0.5)


@pytest.fixture
def boom_breaks_runs(monkeypatch):
    """Every scripted policy raises on a request mentioning BOOM: a question whose run breaks."""
    import ragteam.nodes.policies.scripted as scripted

    original = scripted.ScriptedPolicy._respond

    def respond(self, request):
        if "BOOM" in request.messages[-1]["content"]:
            raise RuntimeError("this run broke")
        return original(self, request)

    monkeypatch.setattr(scripted.ScriptedPolicy, "_respond", respond)


def one_error_line(capsys) -> str:
    """The one line a refused command wrote to stderr (no traceback, nothing else)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]
