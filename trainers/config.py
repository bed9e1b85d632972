"""Training configuration: defaults, a YAML file, then command-line overrides (in that order),
validated as a whole by a typed schema before anything loads.

Types and ranges are checked field by field; YAML's number forms are accepted where a number is
expected (``lr: 1e-5`` reaches YAML as a string), ``steps: ten`` is not. Every problem is a
``ValueError`` reading ``<where>: <key>: <reason>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from ragteam.nodes.policies.role_adapters import ROLES_FILE
from ragteam.trainers.algorithms.settings import PPOSettings, Schema


class RaySettings(Schema):
    """The distributed backend (``backend: ray``): rollout workers, each owning a vLLM engine,
    and one learner actor. On CPU every actor takes CPUs only; give GPUs per actor on GPU nodes."""
    address: str | None = None          # a running cluster (``ray start --head``); None: local
    rollout_workers: int = Field(2, ge=1)
    cpus_per_worker: float = Field(1.0, ge=0)
    gpus_per_worker: float = Field(0.0, ge=0)
    learner_gpus: float = Field(0.0, ge=0)  # per learner rank
    learner_ranks: int = Field(1, ge=1)     # data-parallel learner actors (DeepSpeed ZeRO over
                                            # gloo on CPU, NCCL on GPU); 1: one learner
    kv_cache_gib: int = Field(1, ge=1)  # each CPU worker's vLLM KV cache (VLLM_CPU_KVCACHE_SPACE);
                                        # 1 GiB holds ~23k tokens of SmolLM2-135M
    max_worker_restarts: int = Field(3, ge=0)  # per worker; a dead worker's share is rerun


class VLLMSettings(Schema):
    """The rollout engines' options (``sampler: vllm``); each None is chosen by device (see
    ``nodes.policies.vllm.engine_args``: float32, 4096 tokens and eager on CPU; the model's
    dtype and length, CUDA graphs and 85% of the memory on a GPU)."""
    dtype: str | None = None                 # e.g. bfloat16; "auto" = the model's own
    max_model_len: int | None = Field(None, ge=16)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    tensor_parallel_size: int | None = Field(None, ge=1)
    enforce_eager: bool | None = None        # False = CUDA graphs
    enable_sleep_mode: bool | None = None    # free the engine's memory while the learner updates


class AsyncSettings(Schema):
    """Asynchronous rollouts (``async:``): the rollouts of the next steps run while the learner
    updates (``trainers.loop.Trainer``; docs/train.md, "Asynchronous rollouts")."""
    # how many learner steps (weight syncs) a step's runs may be sampled behind the weights that
    # train on them: step s starts only once the rollout weights are from step s − k or later
    # (admission: a run that started is never dropped). 0: the synchronous step
    max_staleness: int = Field(0, ge=0)


class AdapterSettings(Schema):
    """One LoRA adapter of ``adapters:`` (``trainers.learner.adapters``): the roles it plays and
    its peft LoRA options; ``lr`` (default: the run's ``lr``) is its own parameter group's."""
    roles: list[str]                 # the roles it plays (required; a role is in one adapter at most)
    r: int = Field(16, ge=1)
    lora_alpha: float | None = Field(None, gt=0)  # None: 2·r
    target_modules: str | list[str] = "all-linear"
    lr: float | None = Field(None, gt=0)  # None: the run's lr
    # start from this peft adapter folder (a warm start's export, e.g. OUT/adapters/NAME): its
    # weights, rank, alpha and modules; PPO after a per-role warm start
    init: str | None = None

    @field_validator("roles")
    @classmethod
    def _some_role(cls, roles: list[str]) -> list[str]:
        if not roles:
            raise ValueError("an adapter plays at least one role")
        return roles

    @model_validator(mode="after")
    def _init_folder(self):
        """An ``init`` folder is checked as a peft adapter, and LoRA options given beside it must
        be its own (the weights fix them)."""
        if self.init is None:
            return self
        from ragteam.nodes.policies.model_files import check_adapter_folder

        check_adapter_folder(self.init)
        saved = self._saved_options()
        clash = [f"{k}: {getattr(self, k)!r} (its own: {saved[k]!r})" for k in ("r", "lora_alpha", "target_modules")
                 if k in self.model_fields_set and getattr(self, k) != saved[k]]
        if clash:
            raise ValueError(f"init {self.init}: " + "; ".join(clash))
        return self

    def _saved_options(self) -> dict:
        from ragteam.nodes.policies.model_files import read_json_object

        config = read_json_object(Path(self.init) / "adapter_config.json")
        return {"r": config["r"], "lora_alpha": config.get("lora_alpha") or 2 * config["r"],
                "target_modules": config.get("target_modules") or "all-linear"}

    def lora_options(self) -> dict:
        """peft ``LoraConfig`` options of this adapter (``init``'s own when it starts from one)."""
        if self.init is not None:
            return self._saved_options()
        return {"r": self.r, "lora_alpha": self.lora_alpha or 2 * self.r,
                "target_modules": self.target_modules}


# what an export with per-role adapters holds beside the adapters' folders (an adapter may not
# take one of these names; trainers.learner.adapters.export_adapters writes them)
ADAPTER_EXPORT_FILES = (ROLES_FILE, "tokenizer", "value_head.pt")


def check_adapter_map(adapters: dict[str, AdapterSettings], what: str, roles: set[str] | None = None,
                      frozen: set[str] = frozenset()) -> None:
    """Adapter names that may name a folder of the export (and none of its files), each role in
    one adapter at most, and (when given) known and not ``frozen``; ``what`` leads each error."""
    from ragteam.stores.owned import check_label

    owner: dict[str, str] = {}
    for name, settings in adapters.items():
        check_label(name, f"{what}: adapter name")
        if name in ADAPTER_EXPORT_FILES:
            raise ValueError(f"{what}: {name} names a file of the export beside the adapters' "
                             "folders; choose another name")
        for role in settings.roles:
            if roles is not None and role not in roles:
                raise ValueError(f"{what}: {name}: unknown role {role}; roles: {', '.join(sorted(roles))}")
            if role in owner:
                raise ValueError(f"{what}: role {role} is in two adapters ({owner[role]} and {name})")
            if role in frozen:
                raise ValueError(f"{what}: {name}: role {role} is frozen; a frozen role has no adapter")
            owner[role] = name


RENAMED_BACKENDS = ("deepspeed", "torch")  # ``backend:`` values that now mean ``optimizer:``


DEEPSPEED_ONLY = ("zero_stage", "offload_optimizer")  # settings only the DeepSpeed optimizer reads


def chosen_optimizer(values: dict) -> str:
    """``optimizer: auto``: plain AdamW for one learner in this process (or per-role adapters, on
    any number of learner ranks: each adapter is a group of AdamW's, its state small enough for
    every rank to hold), DeepSpeed where only it will do (the Ray backend's learner ranks, or a
    ZeRO setting asked for).

    Measured, not habit: on a CPU host DeepSpeed's CPU-Adam offload kept a second fp32 copy of
    the weights (a 0.5B fine-tune: 20.4 GB resident against 10.6 GB with AdamW); on one H100, a
    1.6B learner ran 26.2k tokens/s with AdamW, 15.5k on ZeRO-2 without offload and far slower
    with it. A model whose AdamW state does not fit one device asks for DeepSpeed by name."""
    ray = values.get("ray") or {}
    ranks = ray.get("learner_ranks", 1) if isinstance(ray, dict) else ray.learner_ranks
    wants_zero = any(values.get(key) is not None for key in DEEPSPEED_ONLY)
    if values.get("adapters") and not wants_zero:  # per-role adapters: AdamW's groups, any rank count
        return "torch"
    return "deepspeed" if values.get("backend") == "ray" or ranks > 1 or wants_zero else "torch"


class TrainConfig(Schema):
    """Every option of a PPO run, validated before anything loads (the YAML keys and the flags
    of ``trainers/ppo_graph.py``)."""

    graph: str = "jade"
    data: str | None = None          # QA file (default: the bundled HotpotQA dev sample)
    index: str | None = None         # built index directory (default: bundled BM25 store)
    model: str = "offline"           # "offline" (packaged SmolLM2-135M) or a local HF directory
    out: str = "runs/ppo"
    steps: int = Field(10, ge=1)
    seed: int = Field(0, ge=0)
    limit: int | None = Field(None, ge=1)  # use only the first N questions (the rest stay held out)
    # rollout
    questions_per_step: int = Field(4, ge=1)
    samples_per_question: int = Field(1, ge=0)  # the team's own runs of each question (0: forced ones only)
    # a method whose planner picks workflows (JADE; its Method.workflow_choice): one more run of
    # each question per workflow listed, the planner's reply for the whole question written as
    # that workflow: GRPO groups that compare workflows even once the planner samples only one
    forced_workflows: list[str] = []
    # the workflows the planner chooses among (Settings.planning.choices; empty: it writes any);
    # a method whose planner picks workflows only
    plan_choices: list[str] = []
    forced_samples: int = Field(1, ge=1)  # runs per forced workflow (2+: ppo.advantage grpo_by_workflow
                                          # then compares executions of the same plan)
    temperature: float = Field(1.0, ge=0, le=5)
    concurrency: int = Field(8, ge=1)
    # what samples the rollouts: HF generate on the learner's own module, or a vLLM engine
    sampler: Literal["hf", "vllm"] = "hf"
    vllm: VLLMSettings = Field(default_factory=VLLMSettings)  # the engines' options (null = by device)
    # how new weights reach the vLLM rollout engines: streamed in buckets over a gloo/NCCL group
    # (trainers/learner/weight_channel.py), one safetensors blob per engine, or (with lora) the
    # adapter alone, which the engines serve over their base weights (with adapters: those that
    # changed, the only sync per-role adapters have)
    weight_sync: Literal["channel", "blob", "adapter"] = "channel"
    device: str = "cpu"              # the learner's device: cpu, cuda[:N] or auto
    bf16: bool = False               # learner weights in bfloat16 (GPU only)
    max_rounds: int | None = Field(None, ge=1)  # run budget override (Settings.max_rounds)
    top_k: int | None = Field(None, ge=1)  # documents per retrieval (Settings.top_k)
    fan_out: int | None = Field(None, ge=0)  # one retrieval per listed name, up to N (Settings.serial.fan_out)
    fallback_workflow: str | None = None  # override Settings.planning.fallback ("" = none)
    few_shot: bool | None = None     # send each role's demonstrations (Settings.few_shot; None: on)
    # JADE's loop: write the planner's reply for every sub-question as this workflow instead of
    # sampling it (Settings.written.subplans; with ppo.written_replies: skip, not trained)
    subquestion_workflow: str | None = None
    train_roles: list[str] | None = None  # default: what the reward scheme trains
    frozen_roles: list[str] | None = None  # default: what the method freezes (MAO-ARAG executors)
    # who plays the frozen roles: a policy spec (e.g. rules:routing-world, hf:PATH); None: the
    # learner's initial weights, never synced
    frozen_policy: str | None = None
    # reward
    reward: dict = Field(default_factory=dict)  # {"scheme": name, **options}
    # where the step runs (distribution backend) and the learner's optimizer
    backend: Literal["embedded", "ray"] = "embedded"  # this process, or Ray + OpenRLHF (rollout
                                                      # workers + a learner actor)
    # ZeRO + CPU Adam, plain AdamW, or auto: chosen by measurement (``chosen_optimizer``)
    optimizer: Literal["auto", "deepspeed", "torch"] = "auto"
    # how the torch optimizer moves the weights: AdamW, or plain SGD (optimizer: torch only; no
    # per-weight scaling, so pushes that cancel in the gradient cancel in the update: the gate's)
    update_rule: Literal["adamw", "sgd"] = "adamw"
    ray: RaySettings = Field(default_factory=RaySettings)  # null in YAML = the defaults
    zero_stage: int = Field(2, ge=0, le=3)  # 3 shards the weights too (several learner ranks)
    offload_optimizer: bool = True   # ZeRO's optimizer state in CPU memory, updated by CPU Adam
    gradient_checkpointing: bool = False  # recompute activations in the backward pass (long calls)
    lr: float = Field(2e-5, ge=0)  # 0: rollouts and updates that change nothing (a control run)
    head_lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    warmup_steps: int = Field(0, ge=0)
    lora: dict | None = None         # peft LoraConfig options, e.g. {"r": 16, "lora_alpha": 32}
    # one LoRA adapter per role or group of roles over one base model, all trained in each PPO
    # step from their own roles' calls (trainers/learner/adapters.py); name → {roles, r,
    # lora_alpha, target_modules, lr}. A role in no adapter is played by the base weights (every
    # adapter off) and is not trained: its calls are traced `trained: false` and never reach the
    # learner's buffer. Not with lora; runs optimizer torch (on one learner rank or several, data
    # parallel), and on vLLM engines weight_sync adapter
    adapters: dict[str, AdapterSettings] | None = None
    ppo: PPOSettings = Field(default_factory=PPOSettings)  # null in YAML = the defaults
    # the next steps' rollouts running while the learner updates (``async`` in YAML, a Python keyword)
    async_: AsyncSettings = Field(default_factory=AsyncSettings, alias="async")
    # bookkeeping
    # a checkpoint every N steps; None: whenever the steps since the last one took at least
    # CHECKPOINT_SHARE⁻¹ − 1 times its save (checkpoints ≤ ~10% of the wall time; a kill loses
    # at most that much work), and always after the first and the last step
    save_every: int | None = Field(None, ge=1)
    # checkpoint folders kept (the newest; each save prints its size — a DeepSpeed one of the
    # 135M model is ~2.1 GB); older ones are deleted, never the one ``latest`` names
    keep_checkpoints: int = Field(2, ge=1)
    export_hf: bool = True           # write OUT/hf at the end (loadable with --policy hf:OUT/hf);
                                     # with adapters, OUT/adapters/NAME/ (peft) + roles.json
    # each step's runs in OUT/rollouts/step-NNNNNN.jsonl, a record a run (trainers.rollout.
    # rollout_records: question, written workflow, answer, scores, reward, each call's role, reply
    # and reward; no prompts or ids, a few KB a run): what the team did, step by step
    save_rollouts: bool = True

    @field_validator("graph")
    @classmethod
    def _known_graph(cls, name: str) -> str:
        """A method name or a user's graph (``file.py:NAME``, ``package.module:NAME``), loaded
        and checked here; a file's path is made absolute so Ray workers and resumes find it."""
        from ragteam.graphs.methods import get_method
        from ragteam.graphs.methods.references import canonical_reference

        get_method(name)  # a ValueError listing the known graphs, or naming a bad reference
        return canonical_reference(name)

    @field_validator("adapters")
    @classmethod
    def _some_adapter(cls, adapters: dict | None) -> dict | None:
        if adapters is not None and not adapters:
            raise ValueError("name at least one adapter, or leave adapters out")
        return adapters

    model_config = ConfigDict(**Schema.model_config, validate_by_name=True, validate_by_alias=True)

    @field_validator("ppo", "ray", "vllm", "async_", mode="before")
    @classmethod
    def _section_defaults(cls, value):
        return {} if value is None else value

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, values):
        """Keys from before the optimizer and the sampler had their own names are refused, naming
        the new one (``backend: deepspeed|torch``, ``ray.learner_engine``, ``engine: hf|vllm``):
        one word, one meaning ("engine" is a rollout engine object, never a config value)."""
        if not isinstance(values, dict):
            return values
        values = dict(values)
        if values.get("backend") in RENAMED_BACKENDS:
            raise ValueError(f"backend: {values['backend']} is now optimizer: {values['backend']} "
                             "(backend says where the step runs: embedded or ray)")
        if isinstance(values.get("ray"), dict) and "learner_engine" in values["ray"]:
            raise ValueError(f"ray.learner_engine is now optimizer: {values['ray']['learner_engine']}")
        if "engine" in values:
            if not isinstance(values["engine"], str):  # an engine object, as train_ppo(engine=...) took
                raise ValueError("engine= is now engines=[...]: started rollout engines (trainers.engines)")
            raise ValueError(f"engine: {values['engine']} is now sampler: {values['engine']} "
                             "(what samples the rollouts: hf or vllm)")
        if values.get("optimizer", "auto") == "auto":
            values["optimizer"] = chosen_optimizer(values)
        return values

    @field_validator("model")
    @classmethod
    def _local_model(cls, spec: str) -> str:
        """Checked here so a typo fails before anything loads (never a hub lookup)."""
        from ragteam.nodes.policies.model_files import checked_model_path

        checked_model_path(spec)
        return spec

    @field_validator("frozen_policy")
    @classmethod
    def _policy_spec(cls, spec: str | None) -> str | None:
        from ragteam.nodes.policies.spec import check_policy_spec

        if spec is not None:
            check_policy_spec(spec)
        return spec

    @field_validator("data", "index")
    @classmethod
    def _existing_input(cls, path: str | None, info) -> str | None:
        is_there, what = ((Path.is_file, "dataset file") if info.field_name == "data"
                          else (Path.is_dir, "index directory"))
        if path is not None and not is_there(Path(path)):
            raise ValueError(f"no {what} at {path!r}")
        return path

    @property
    def export_name(self) -> str:
        """Where in the run folder the end of a run exports the model: ``hf`` (one model, LoRA
        merged), or with per-role adapters ``adapters`` (a peft folder each, no merged model:
        ``trainers.learner.adapters.export_adapters``)."""
        return "adapters" if self.adapters else "hf"

    @property
    def export_policy(self) -> str:
        """The ``--policy`` spec that serves the export (``ragteam run/eval``): ``hf:OUT/hf``,
        or with per-role adapters ``adapters:OUT/adapters``."""
        folder = Path(self.out) / self.export_name
        return f"adapters:{folder}" if self.adapters else f"hf:{folder}"

    @model_validator(mode="after")
    def _known_reward_and_roles(self) -> "TrainConfig":
        """The reward scheme (a registered one or the graph's own) is built once here, so an
        unknown scheme or option fails now; the roles named must be roles that exist; then the
        options that exclude each other and the shape of a step's groups."""
        from ragteam.graphs.methods import get_method, make_reward, reward_schemes
        from ragteam.nodes.roles import known_roles

        method = get_method(self.graph)  # loads a user's graph module: its roles are defined
        options = dict(self.reward)
        scheme = options.pop("scheme", method.default_reward)
        known = reward_schemes(method)
        if scheme not in known:
            raise ValueError(f"reward: unknown reward scheme {scheme!r}; known: {', '.join(known)}")
        make_reward(scheme, method, **options)
        roles = known_roles()
        for key in ("train_roles", "frozen_roles"):
            unknown = sorted(set(getattr(self, key) or ()) - roles)
            if unknown:
                raise ValueError(f"{key}: unknown role(s) {', '.join(unknown)}; roles: "
                                 f"{', '.join(sorted(roles))}")
        unknown = sorted(set(method.frozen_roles) - roles)  # a typo would train the role meant frozen
        if unknown:
            raise ValueError(f"graph {self.graph!r}: its Method freezes unknown role(s) "
                             f"{', '.join(unknown)}; roles: {', '.join(sorted(roles))}")
        if self.adapters:  # before the rank rule below: its advice (DeepSpeed) does not apply here
            self._check_adapters(roles, method)
        self._check_combinations()
        self._check_rollout_groups(method)
        return self

    def _check_combinations(self) -> None:
        """Options that exclude each other: learner ranks, adapter syncs, the menu, the SGD rule,
        ZeRO-3 with LoRA, a sleeping engine under asynchronous rollouts."""
        # several ranks: DeepSpeed, or plain data-parallel AdamW over a small trainable set
        data_parallel = self.optimizer == "deepspeed" or (self.optimizer == "torch" and (self.lora or self.adapters))
        if self.ray.learner_ranks > 1 and (self.backend != "ray" or not data_parallel):
            raise ValueError("ray.learner_ranks: several learner ranks run in the Ray backend on "
                             "DeepSpeed (backend: ray, optimizer: deepspeed), or on optimizer: torch "
                             "when they train LoRA or per-role adapters")
        if self.weight_sync == "adapter" and not self.adapters:
            if not self.lora or self.lora.get("modules_to_save"):
                raise ValueError("weight_sync: adapter sends the LoRA adapter alone; it needs lora and "
                                 "no modules_to_save (those weights would not reach the engines)")
            engine_options(self)  # a rank no engine can serve fails here, not at the engine's start
        if self.plan_choices and (self.sampler == "vllm" or self.backend == "ray"):
            raise ValueError("plan_choices: the planner chooses by scoring each reply, which only the hf "
                             "sampler does yet (sampler: hf, backend: embedded)")
        if self.update_rule == "sgd" and self.optimizer == "deepspeed":
            raise ValueError("update_rule: sgd is the torch optimizer's; DeepSpeed updates with Adam "
                             "(set optimizer: torch, or leave the rule adamw)")
        if self.lora and self.zero_stage == 3:
            raise ValueError("zero_stage: 3 with lora is not supported (the adapters would be "
                             "merged into sharded weights); use zero_stage 2")
        if self.async_.max_staleness and self.sampler == "vllm" and self.vllm.enable_sleep_mode:
            raise ValueError("async.max_staleness: asynchronous rollouts keep the engine generating "
                             "while the learner updates; an engine that sleeps meanwhile "
                             "(vllm.enable_sleep_mode) cannot: set one of them off")

    def _check_rollout_groups(self, method) -> None:
        """A step's group of runs per question: large enough for its advantage estimator, and
        forced workflows or a menu only for a method whose planner picks workflows."""
        if self.samples_per_question == 0 and not self.forced_workflows:
            raise ValueError("samples_per_question: 0 runs nothing unless forced_workflows are given")
        group = self.samples_per_question + len(self.forced_workflows) * self.forced_samples
        if self.ppo.advantage in ("grpo", "grpo_by_workflow") and group < 2:
            raise ValueError("samples_per_question: GRPO compares the runs of one question with "
                             "each other, so it needs at least 2 (samples_per_question plus "
                             f"forced_workflows; got {group})")
        if self.ppo.advantage == "grpo_by_workflow" and max(self.samples_per_question, self.forced_samples) < 2:
            raise ValueError("ppo.advantage: grpo_by_workflow compares executions of the same workflow "
                             "with each other: set forced_samples (runs per forced workflow) or "
                             "samples_per_question to 2 or more")
        for name in ("forced_workflows", "plan_choices"):
            if getattr(self, name) and method.workflow_choice is None:
                raise ValueError(f"{name}: graph {self.graph!r} has no planner that picks "
                                 "a workflow (JADE's does)")
            for workflow in getattr(self, name):
                method.workflow_choice.check(workflow)

    def _check_adapters(self, roles: set[str], method) -> None:
        """``adapters``: plain names, known roles each in one adapter and none frozen, and only
        the parts of a run that train them (``trainers.learner.adapters``): AdamW, on one learner
        rank or several."""
        if self.lora:
            raise ValueError("adapters: lora and adapters both name LoRA adapters; use one or the other")
        if self.optimizer != "torch":  # each adapter its own optimizer group (RoleAdapters)
            raise ValueError(f"adapters: optimizer: {self.optimizer} is not supported with per-role "
                             "adapters yet; use optimizer: torch")
        if self.sampler == "vllm":  # merged weights could hold one adapter only
            if self.weight_sync != "adapter":
                raise ValueError(f"adapters: weight_sync: {self.weight_sync}: per-role adapters reach a "
                                 "vLLM engine as the adapters alone; use weight_sync: adapter")
            engine_options(self)  # a rank no engine can serve fails here, not at the engine's start
        frozen = set(self.frozen_roles if self.frozen_roles is not None else method.frozen_roles)
        check_adapter_map(self.adapters, "adapters", roles, frozen)

    @field_validator("device")
    @classmethod
    def _device_name(cls, name: str) -> str:
        import re

        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", name):
            raise ValueError(f"use cpu, cuda, cuda:N or auto, got {name!r}")
        return name

    @field_validator("out")
    @classmethod
    def _named_folder(cls, out: str) -> str:
        if not out.strip():
            raise ValueError("empty path; give a run folder")
        return out

    @field_validator("fallback_workflow", "subquestion_workflow")
    @classmethod
    def _valid_workflow(cls, workflow: str | None) -> str | None:
        from ragteam.nodes.topology import checked_workflow

        if workflow:  # "" = none
            checked_workflow(workflow)
        return workflow

    @field_validator("forced_workflows", "plan_choices")
    @classmethod
    def _listed_once(cls, workflows: list[str]) -> list[str]:
        if len(set(workflows)) != len(workflows):
            raise ValueError(f"a workflow is listed twice in {workflows}")
        return workflows

    @field_validator("lora")
    @classmethod
    def _lora_options(cls, options: dict | None) -> dict | None:
        """peft's LoraConfig options: known names, and a rank and alpha that are positive."""
        import dataclasses

        if options is None:
            return None
        from peft import LoraConfig

        unknown = sorted(set(options) - {f.name for f in dataclasses.fields(LoraConfig)})
        if unknown:
            raise ValueError(f"unknown LoRA option(s) {', '.join(map(str, unknown))}")
        for key in ("r", "lora_alpha"):
            value = options.get(key, 1)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{key} must be a positive number, got {value!r}")
        return options


def engine_options(config: TrainConfig) -> dict:
    """The rollout engines' options from the config: its ``vllm:`` section, and LoRA serving
    when the adapter alone is synced: the ``lora`` one, or every per-role adapter at once (a
    slot each and a spare, as a served team's engine)."""
    options = config.vllm.model_dump()
    if config.weight_sync == "adapter":
        from ragteam.nodes.policies.vllm import adapter_engine_options, team_engine_options

        if config.adapters:
            options.update(team_engine_options(max(a.r for a in config.adapters.values()), len(config.adapters)))
        else:
            options.update(adapter_engine_options(int(config.lora["r"])))
    return options


def adapter_options(specs: list[str], rank: int) -> dict[str, AdapterSettings]:
    """Command-line ``--adapter NAME=ROLE[,ROLE]`` options (each of rank ``rank``) as the
    ``adapters:`` map, held to its rules (``check_adapter_map``); a ``ValueError`` names the bad one."""
    settings = {}
    for spec in specs:
        name, _, roles = spec.partition("=")
        if not roles or name in settings:
            raise ValueError(f"--adapter {spec!r}: expected NAME=ROLE[,ROLE], each NAME once")
        settings[name] = AdapterSettings(roles=roles.split(","), r=rank)
    check_adapter_map(settings, "--adapter")
    return settings


def lora_settings(rank: int) -> dict:
    """peft LoRA options for ``--lora-r``: alpha = 2·rank on every linear layer."""
    return {"r": rank, "lora_alpha": 2 * rank, "target_modules": "all-linear"}


def readable_errors(error: ValidationError, where: str) -> str:
    """A pydantic error as ``<where>: <key>: <reason>`` lines joined by '; '."""
    problems = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            problems.append(f"{where}: unknown option {key!r}")
        else:  # a whole-config check names its keys itself
            problems.append(f"{where}: {key}: {message}" if key else f"{where}: {message}")
    return "; ".join(problems)


def from_dict(values: dict, where: str = "config") -> TrainConfig:
    try:
        return TrainConfig.model_validate(values)
    except ValidationError as error:
        raise ValueError(readable_errors(error, where)) from None


def read_yaml(path: str | Path) -> dict:
    """A YAML mapping of options; bad YAML, a duplicated key or a file that is not a mapping is
    a ``ValueError`` naming the file."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        """YAML would keep the last of two equal keys silently; a config must not."""

    def mapping(loader, node, deep=False):
        # the keys written here; a merge (``<<: *anchor``) may give keys these override
        keys = [loader.construct_object(key, deep=deep) for key, _ in node.value
                if key.tag != "tag:yaml.org,2002:merge"]
        repeated = sorted({str(k) for k in keys if keys.count(k) > 1})
        if repeated:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key(s) {', '.join(repeated)}", node.start_mark)
        return loader.construct_mapping(node, deep)

    UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        loaded = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=UniqueKeys)
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML ({error})") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read the config ({error})") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ValueError(f"{path}: expected a mapping of options")
    return dict(loaded or {})


def load_config(path: str | Path | None, overrides: dict) -> TrainConfig:
    """YAML file (if any) then overrides; keys of ``overrides`` with value None are ignored,
    and ``ppo.<name>`` / ``ray.<name>`` / ``vllm.<name>`` / ``async.<name>`` keys override fields
    of those sections."""
    values: dict = read_yaml(path) if path else {}
    given = {k: v for k, v in overrides.items() if v is not None}
    for section in ("ppo", "ray", "vllm", "async"):
        prefix = section + "."
        fields = {k[len(prefix):]: given.pop(k) for k in list(given) if k.startswith(prefix)}
        if fields:
            base = values.get(section) or {}
            values[section] = {**base, **fields} if isinstance(base, dict) else base  # else: reported below
    return from_dict({**values, **given}, str(path or "config"))
