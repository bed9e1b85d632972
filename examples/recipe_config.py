"""The learning recipe's config (``examples/jade_hotpotqa.yaml``), checked whole before any stage
runs: types and ranges, the graph and baselines, the data files (read once, so a bad line is
named now rather than after an hour of sampling), enough training questions for the rounds, and
the PPO section as the trainer itself validates it. Every problem is one ``ValueError`` line
naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=False)

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, values):
        if not isinstance(values, dict):
            raise ValueError(f"expected a mapping of options, got {type(values).__name__}")
        return values


def _workflow(text: str | None) -> str | None:
    from ragteam.nodes.topology import FormatViolation, parse_topology

    if text and isinstance(parse_topology(text), FormatViolation):
        raise ValueError(f"{text!r} is not a workflow")
    return text


class Round(_Strict):
    """One warm-start round: sample the team on a slice of the training questions, then SFT."""

    questions: int = Field(ge=1)
    samples: int = Field(1, ge=1)
    temperature: float = Field(ge=0, le=5)
    min_f1: float = Field(ge=0, le=1)
    epochs: int = Field(ge=1)
    lr: float = Field(gt=0)
    roles: list[str] = ["all"]
    # the fine-tune's optimizer (sft_graph.py --optimizer). On a CPU-only host DeepSpeed's CPU
    # offload keeps a second fp32 copy of the weights and gradient buffers: for the 0.5B reader
    # ~20 GB after one step against ~11 GB for plain AdamW
    optimizer: Literal["deepspeed", "torch"] = "torch"
    relabel_fallback: str | None = None
    # fine-tune a LoRA of this rank (merged into the exported weights) instead of every weight:
    # on a CPU host it needs a fraction of a full fine-tune's optimizer memory
    lora_r: int | None = Field(None, ge=1)
    offset: int | None = Field(None, ge=0)
    # sample the team as itself and as each of these fixed workflows on every question; the
    # planner learns the best per question (trainers/algorithms/sft.py::best_workflow_transitions)
    explore: list[str] | None = None
    # with explore: also the team as itself, with its planner (false: the fixed workflows alone,
    # enough when the planner learns per type, and a third to half cheaper on a CPU)
    explore_team: bool = True
    # the answer generator learns every gold answer its documents held, whatever the run scored
    # (sft_graph.py --select hindsight-answers): where answers are sets, score filtering never shows a list.
    # "only": the answer summarizer too, and no answer chosen by score, not even to a sub-question
    # (--select hindsight-answers-only): on shared weights an untrained reader's one-name answers to
    # sub-questions outweighed the lists (docs/results/phantomwiki.md)
    hindsight_answers: bool | Literal["only"] = False
    # with explore: each explored workflow that decomposes serially runs again per entry, its
    # decomposer shown an example chain of that many steps (ragteam headroom
    # --decomposer-example-steps): a small model copies its example's length, so without this
    # every sampled decomposition has the one example's two steps (docs/results/phantomwiki.md)
    decomposer_examples: list[Literal[2, 3, 4]] | None = None
    # the decomposer learns, per question, the decomposition whose run put the most gold names
    # before its answer generator, whatever it scored (the study's hindsight-decompositions selector);
    # "type": of the length that reached the most gold names on the question's type (metadata.type):
    # per question, ties to fewer steps taught two steps at 3-4 hops (hindsight-decompositions=DATA)
    hindsight_decompositions: bool | Literal["type"] = False
    # instead: the decomposer learns these given decompositions (a nodes/decompositions.py file,
    # relative to the checkout, e.g. examples/research/phantomwiki/phantomwiki_chains.py's; the
    # study's given-decompositions selector): a small decomposer never samples the chain a
    # question needs
    decomposition_targets: str | None = None
    # with explore: what the planner learns. "question": per question the candidate that scored
    # best (ties to the cheaper); "type": per question type (metadata.type, e.g. hops-N) the fixed
    # workflow with the best mean F1 on that type, for every question of it. One sampled run per
    # question is noisy, and where every candidate fails the cheapest wins: per question, a
    # planner taught one retrieval for 3-4 hops where 3-step chains paid more on the type
    # (sft_graph.py --select planner-by-type=DATA, docs/results/phantomwiki.md)
    planner_targets: Literal["question", "type"] = "question"
    # after the fine-tune, the round's weights run on the held-out questions as the team and as
    # each fixed_workflows entry (greedy): the learning curve on questions never trained on. The
    # last round's weights are evaluated anyway (stage 4), so set it on the earlier rounds
    held_out: bool = False
    # instead of fine-tuning the shared weights: one LoRA adapter per name, trained on its roles'
    # calls alone (sft_graph.py --adapter, rank lora_r or 16); the team is then the untouched
    # model serving its adapters (--policy adapters:DIR), each role in one adapter at most
    adapters: dict[str, list[str]] | None = None

    _check_fallback = field_validator("relabel_fallback")(_workflow)

    @field_validator("explore")
    @classmethod
    def _workflows(cls, value):
        if value is not None and not value:
            raise ValueError("explore: give at least one workflow (or leave it out)")
        return [_workflow(w) for w in value] if value else value

    def check_adapters(self, method, where: str) -> None:
        """``adapters``: plain names, known roles of ``method`` each in one adapter and none frozen
        (the trainer's rules for ``adapters:``), trained with plain AdamW."""
        from ragteam.nodes.roles import all_roles
        from ragteam.nodes.roles.base import defined_roles
        from ragteam.trainers.config import AdapterSettings, check_adapter_map

        if self.optimizer != "torch":  # each adapter is its own AdamW group (sft_graph.py --adapter)
            raise ValueError(f"{where}: optimizer: {self.optimizer}; adapters train with optimizer: torch")
        try:
            settings = {name: AdapterSettings(roles=roles) for name, roles in self.adapters.items()}
        except ValidationError:
            raise ValueError(f"{where}: an adapter plays at least one role") from None
        check_adapter_map(settings, where, set(all_roles()) | defined_roles(), set(method.frozen_roles))

    @model_validator(mode="after")
    def _one_selection(self) -> "Round":
        if self.explore and (self.samples > 1 or self.relabel_fallback):
            raise ValueError("explore: samples and relabel_fallback belong to plain rounds; an "
                             "exploring round runs each workflow once per question")
        if self.decomposition_targets and self.hindsight_decompositions:
            raise ValueError("decomposition_targets and hindsight_decompositions: choose one source of "
                             "the decomposer's targets")
        if not self.explore_team and self.planner_targets != "type":
            raise ValueError("explore_team: false needs planner_targets: type (per question, the team's "
                             "own runs are among the candidates the planner learns from)")
        if self.planner_targets == "type" and not self.explore:
            raise ValueError("planner_targets: type chooses among explored workflows; list them in explore")
        if self.decomposer_examples and not any("QDS" in w for w in self.explore or ()):
            raise ValueError("decomposer_examples: vary the examples of a serially decomposing "
                             "workflow; list one (e.g. QDS) in explore")
        return self


class RecipeConfig(_Strict):
    graph: str
    train_data: str | None = None   # needed by rounds and the PPO stage
    eval_data: str
    corpus: str
    eval_corpus: str | None = None  # the held-out questions' own corpus (PhantomWiki's dev world)
    index_kind: Literal["bm25", "chroma", "hybrid"] = "bm25"
    baselines: list[str] = []
    sampler: Literal["hf", "vllm"] = "hf"  # what samples every stage's runs: HF generate or vLLM
    concurrency: int = Field(8, ge=1)
    seed: int = Field(0, ge=0)
    shuffle_train: bool = False  # rounds slice the training questions in one seeded order, not
                                 # the file's (PhantomWiki's file is grouped by question type)
    top_k: int | None = Field(None, ge=1)  # documents per retrieval, in every eval, round and PPO step
    fan_out: int = Field(0, ge=0)  # one retrieval per name of a listed earlier answer, up to N (Settings.serial.fan_out)
    # each CPU vLLM engine's KV cache (VLLM_CPU_KVCACHE_SPACE, else 4 GiB): the PPO stage runs
    # the engine beside the learner, so on a small host a learner's memory comes from here
    cpu_kv_cache_gib: int | None = Field(None, ge=1)
    # the trained team against its own weights run as each of these fixed workflows (no planner)
    fixed_workflows: list[str] = []
    policy: str = "offline"          # the untrained team
    model: str = "offline"           # the weights the first round fine-tunes
    rounds: list[Round] = []
    ppo: dict | None = None          # trainers/ppo_graph.py options for the PPO stage

    @field_validator("graph", "baselines")
    @classmethod
    def _known_graphs(cls, value):
        from ragteam.graphs.methods import get_method

        for name in [value] if isinstance(value, str) else value:
            get_method(name)
        return value

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, values):
        if isinstance(values, dict) and "engine" in values:  # one word, one meaning: see TrainConfig
            raise ValueError(f"engine: {values['engine']} is now sampler: {values['engine']}")
        return values

    @model_validator(mode="after")
    def _stages_fit(self) -> "RecipeConfig":
        from ragteam.graphs.methods import get_method

        method = get_method(self.graph)
        for workflow in self.fixed_workflows:
            _workflow(workflow)
        if (self.fixed_workflows or any(r.explore for r in self.rounds)) and method.name != "jade":
            raise ValueError(f"explore / fixed_workflows: fixed workflows run JADE's team without its "
                             f"planner; graph {self.graph!r} is not JADE")
        if self.ppo and method.frozen_roles:
            # the trainer's frozen copy is its starting model, here the warm start, not the initial one
            raise ValueError(f"ppo: a PPO stage after a warm start trains every role; "
                             f"{method.name} freezes {', '.join(method.frozen_roles)}")
        for number, options in enumerate(self.rounds, 1):
            if not options.adapters:
                continue
            if number < len(self.rounds) or self.ppo:
                # a fine-tune (or the PPO stage) starts from one model, not from a base and its adapters
                raise ValueError("rounds: adapters: only the last round may train adapters, and not "
                                 "before a ppo: section (set ppo: null, or train adapters there)")
            options.check_adapters(method, f"rounds: round {number}: adapters")
        if (self.rounds or self.ppo) and not self.train_data:
            raise ValueError("train_data: the rounds and the PPO stage need training questions")
        if self.ppo is not None:
            set_above = set(TOP_LEVEL_PPO_KEYS) | {"data", "index", "model", "out", "top_k", "fan_out"}
            clash = sorted(set_above & set(self.ppo))
            if clash:
                raise ValueError(f"ppo: {', '.join(clash)} come(s) from the recipe's top level")
            ppo_train_config(self.ppo, self.model_dump())
        return self


TOP_LEVEL_PPO_KEYS = ("graph", "seed", "sampler")  # the PPO stage's options the recipe sets once


def ppo_train_config(ppo: dict, recipe: dict, out: str | None = None):
    """The PPO stage's ``TrainConfig``, as its trainer will see it: the recipe's ``ppo:`` section
    with the options the recipe's top level sets (and the stage's folder, ``out``)."""
    from ragteam.trainers.config import from_dict

    values = {**ppo, **{key: recipe[key] for key in TOP_LEVEL_PPO_KEYS}}
    return from_dict({**values, **({"out": out} if out else {})}, "ppo")


def _for_key(key: str, check, *args):
    """``check(*args)``, its failure (a file that is absent, unreadable or malformed) reported
    under the recipe key that named the file."""
    try:
        return check(*args)
    except OSError as error:
        raise ValueError(f"{key}: {error.filename or ''}: {error.strerror or error}") from None
    except ValueError as error:
        raise ValueError(f"{key}: {error}") from None


def _rooted(spec: str, root: Path, bare: bool = False) -> str:
    """A policy or model spec with its model folder taken from ``root``, where the stages run
    (``bare``: the spec may be the folder itself, as ``model``'s may)."""
    if spec.startswith(("hf:", "vllm:")):
        prefix, path = spec.split(":", 1)
        return f"{prefix}:{root / path}"
    offline = spec == "offline" or spec.startswith("offline:")
    return str(root / spec) if bare and not offline else spec


def check_inputs(config: RecipeConfig, root: Path) -> None:
    """The files exist and read cleanly, the policy and model are model folders a loader takes,
    and the rounds fit in the training questions."""
    from ragteam.nodes.policies.model_files import checked_model_path
    from ragteam.nodes.policies.spec import check_policy_spec
    from ragteam.stores.corpus import iter_corpus
    from ragteam.stores.datasets import read_dataset
    from ragteam.nodes.decompositions import read_decompositions

    # the stages hand these to subprocesses: a bad one would fail only after the index is built
    _for_key("policy", check_policy_spec, _rooted(config.policy, root))
    _for_key("model", checked_model_path, _rooted(config.model, root, bare=True))
    for key in ("eval_data", "train_data"):
        if getattr(config, key):
            _for_key(key, read_dataset, root / getattr(config, key))
    # format and first record; the index reads all
    for key in ("corpus", "eval_corpus"):
        if getattr(config, key):
            _for_key(key, lambda path: next(iter_corpus(path), None), root / getattr(config, key))
    for number, options in enumerate(config.rounds, 1):
        if options.decomposition_targets:
            _for_key(f"rounds: round {number}: decomposition_targets", read_decompositions,
                     root / options.decomposition_targets)
    if config.rounds:
        available, start = len(read_dataset(root / config.train_data).examples), 0
        for number, options in enumerate(config.rounds, 1):
            start = options.offset if options.offset is not None else start
            if start + options.questions > available:
                raise ValueError(f"rounds: round {number} needs training questions up to "
                                 f"{start + options.questions}; {config.train_data} has {available}")
            start += options.questions


MAX_BASE_DEPTH = 16  # recipes a variant may stand on (base: of base: …)


def recipe_values(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """A recipe file's values over those of the recipe its ``base:`` names (a path relative to
    the file): a variant writes only what it changes. Sections merge key by key (a variant's
    ``ppo: {advantage: …}`` keeps the base's other PPO options); lists and values replace."""
    from ragteam.trainers.config import read_yaml

    values = read_yaml(path)
    base = values.pop("base", None)
    if base is None:
        return values
    parent, chain = (path.parent / str(base)).resolve(), seen + (path.resolve(),)
    if parent in chain:
        raise ValueError(f"{path}: base: {base} leads back to itself")
    if len(chain) >= MAX_BASE_DEPTH:  # a chain this long is a mistake (and would exhaust the stack)
        raise ValueError(f"{path}: base: more than {MAX_BASE_DEPTH} recipes deep")
    if not parent.is_file():
        raise ValueError(f"{path}: base: no recipe file {parent}")
    return _merged(recipe_values(parent, chain), values)


def _merged(base: dict, changes: dict) -> dict:
    merged = dict(base)
    for key, value in changes.items():
        both_sections = isinstance(value, dict) and isinstance(base.get(key), dict)
        merged[key] = _merged(base[key], value) if both_sections else value
    return merged


def load_recipe(path: str | Path, root: Path) -> RecipeConfig:
    """The recipe at ``path`` (over its ``base:``, if it names one; relative paths inside it are
    relative to ``root``), checked."""
    from ragteam.trainers.config import readable_errors

    values = recipe_values(root / path)
    try:
        config = RecipeConfig.model_validate(values)
    except ValidationError as error:
        raise ValueError(readable_errors(error, str(path))) from None
    try:
        check_inputs(config, root)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return config
