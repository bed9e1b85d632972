"""Fine-tune roles on filtered successful traces (APEX-Searcher's execution stage) with the same
transition format as PPO.

    ragteam eval --graph NAME --policy offline --out runs/traces      # produce traces
    python trainers/sft_graph.py --traces runs/traces --min-f1 0.5 --out runs/sft
    ragteam eval --graph NAME --policy hf:runs/sft/hf ...

By default the roles the traced method names for SFT are trained (APEX-Searcher: its execution
agent; all roles for a method that names none); ``--roles all`` keeps every role. One
checkpoint per epoch (atomic); ``--resume`` continues after the last finished epoch.

``--select NAME[=ARG]`` picks some roles' calls by a rule of their own instead of by score
(``trainers/algorithms/selectors.py``; ``--select list`` names them): ``hindsight-answers`` teaches
the answer generator every gold answer wherever its documents held them all, whatever the run
scored; ``planner-by-type=DATA`` the planner the workflow best on each question type. A study's
own rules are a file away: ``--selectors examples/research/phantomwiki/phantomwiki_selectors.py
--select hindsight-decompositions``.

``--adapter planner=planner`` trains a LoRA adapter on the planner's calls alone and leaves the
model's weights as they are: on one shared model, a fine-tune of one role's calls moves every
role (a planner-only pass once taught the answer generator to reply with workflow names), while
an adapter is played by its roles only (``--policy adapters:OUT/adapters``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[1]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.graphs.apps.cli import fraction, positive_float, positive_int, refused


# flags of earlier versions, each now a selector (or another flag): refused with the new spelling
_RESEARCH = "--selectors examples/research/phantomwiki/phantomwiki_selectors.py "
RENAMED = {"--hindsight-answers": "--select hindsight-answers",
           "--only-hindsight-answers": "--select hindsight-answers-only",
           "--planner-targets-by-type": "--select planner-by-type=DATA",
           "--hindsight-decompositions": _RESEARCH + "--select hindsight-decompositions",
           "--decomposition-targets-by-type": _RESEARCH + "--select hindsight-decompositions=DATA",
           "--decomposition-targets": _RESEARCH + "--select given-decompositions=FILE",
           "--backend": "--optimizer"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traces", action="append", default=[], help="a `ragteam eval --out` folder (repeatable)")
    p.add_argument("--explore", action="append", default=[], metavar="DIR",
                   help="instead: a `ragteam headroom --graph NAME` OUT/top<k> folder of the team on "
                        "training questions (repeatable); per question the planner learns the best "
                        "workflow, the other roles every run scoring at least --min-f1")
    p.add_argument("--select", action="append", default=[], metavar="NAME[=ARG]",
                   help="choose some roles' calls by this selector's rule instead of by score "
                        "(repeatable; `--select list` names the selectors and what they take)")
    p.add_argument("--selectors", action="append", default=[], metavar="FILE.py",
                   help="a file of a study's own @register_selector rules, imported before --select")
    p.add_argument("--min-f1", type=fraction, default=0.5, help="keep calls of runs scoring at least this")
    p.add_argument("--roles", default=None, help="comma-separated roles, or 'all' (default: the traced method's SFT roles)")
    p.add_argument("--graph", default=None, help="the method whose SFT roles are the default, by name or as "
                   "path/to/file.py:NAME (default: the methods the trace folders are named after)")
    p.add_argument("--relabel-fallback", metavar="WORKFLOW", default=None,
                   help="also train a planner whose reply broke its format on the workflow the run "
                        "fell back to (e.g. RA,AG), when that run scored at least --min-f1")
    p.add_argument("--model", default="offline")
    p.add_argument("--out", default="runs/sft")
    p.add_argument("--epochs", type=positive_int, default=2)
    p.add_argument("--lr", type=positive_float, default=1e-5)
    p.add_argument("--minibatch-size", type=positive_int, default=8)
    p.add_argument("--micro-batch-tokens", type=positive_int, default=1024)
    p.add_argument("--optimizer", choices=["torch", "deepspeed"], default="torch",
                   help="AdamW (default: one process gains nothing from ZeRO, and on a CPU host "
                        "DeepSpeed's offload doubled the fine-tune's memory) or DeepSpeed ZeRO + CPU Adam")
    p.add_argument("--zero-stage", type=int, choices=[0, 1, 2], default=2)
    p.add_argument("--lora-r", type=positive_int, default=None, help="train LoRA of this rank (merged "
                   "into the exported model), or the rank of the --adapter ones (default 16)")
    p.add_argument("--adapter", action="append", default=[], metavar="NAME=ROLE[,ROLE]",
                   help="instead: train a LoRA adapter NAME on these roles' calls alone, the model's "
                        "weights untouched (repeatable; exported as OUT/adapters, served by --policy "
                        "adapters:OUT/adapters, the other roles by the model itself)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--save-every", type=positive_int, default=None, metavar="STEPS",
                   help="also checkpoint within an epoch every STEPS optimizer steps (default: when "
                        "the steps since the last save took 9x as long as writing it did)")
    return p


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    renamed = [flag for flag in RENAMED if any(a == flag or a.startswith(flag + "=") for a in argv)]
    if renamed:
        p.error(f"{renamed[0]} is now {RENAMED[renamed[0]]}")
    args = p.parse_args(argv)
    try:
        selectors = checked_selection(p, args)
        if selectors is None:
            return 0
        return fine_tune(args, selectors)
    except OSError as error:  # --out on a read-only mount, a full disk: one line naming the path
        print(f"sft_graph: {refused(error)}", file=sys.stderr)
        return 2
    except ValueError as error:  # a foreign --out, a bad --graph reference or selector, a bad record
        print(f"sft_graph: {str(error)[:2000]}", file=sys.stderr)
        return 2


def checked_selection(p: argparse.ArgumentParser, args: argparse.Namespace):
    """The ``--select`` selectors with their arguments, checked before anything loads (``p``
    reports a bad combination of flags); None when ``--select list`` only asked for their names."""
    from ragteam.trainers.algorithms.selectors import SELECTORS, checked_selectors, load_selectors

    for path in args.selectors:
        load_selectors(path)
    if args.select == ["list"]:
        for s in SELECTORS.values():
            takes = f"={s.argument}" if s.required else f"[={s.argument}]" if s.argument else ""
            print(f"{s.name}{takes}: {s.help}")
        return None
    if bool(args.traces) == bool(args.explore):
        p.error("give --traces or --explore (not both)")
    if args.relabel_fallback and args.explore:
        p.error("--relabel-fallback applies to --traces only")
    if args.adapter and args.optimizer != "torch":  # each adapter is its own AdamW group
        p.error("--adapter trains with --optimizer torch only")
    try:
        if args.adapter:
            role_adapters(args.adapter, args.lora_r or 16)
    except ValueError as error:
        p.error(str(error)[:2000])
    return checked_selectors(args.select, explored=bool(args.explore))


def select_calls(args: argparse.Namespace, selectors, roles: set[str] | None) -> tuple[list, dict]:
    """The calls the fine-tune learns: the selectors' by their rules, every other by score."""
    from transformers import AutoTokenizer

    from ragteam.nodes.policies.spec import model_dir
    from ragteam.trainers.algorithms import sft
    from ragteam.trainers.algorithms.selectors import Selection, run_selectors

    tokenizer = AutoTokenizer.from_pretrained(model_dir(args.model))
    folders = tuple(map(Path, args.explore or args.traces))
    chosen = run_selectors(selectors, Selection(folders, bool(args.explore), frozenset(roles) if roles else None,
                                                tokenizer, args.min_f1))
    claims = chosen.claims if selectors else None
    if args.explore:
        items, counts = sft.best_workflow_transitions(folders, args.min_f1, roles, tokenizer, claims)
    else:
        relabel = None
        if args.relabel_fallback:
            reply = sft.planner_reply([args.graph] if args.graph else sft.traced_methods(args.traces))
            relabel = sft.planner_fallback_relabel(tokenizer, reply, args.relabel_fallback)
        items, counts = sft.successful_transitions(folders, args.min_f1, roles, relabel, claims, tokenizer)
    return chosen.items + items, {**counts, **chosen.counts}


def fine_tune(args: argparse.Namespace, selectors) -> int:
    """Select the calls, train on them, export; the exit status."""
    from ragteam.graphs.apps.progress import quiet_libraries
    from ragteam.graphs.methods import get_method
    from ragteam.nodes.policies.role_adapters import BASE
    from ragteam.trainers.algorithms.sft import default_roles
    from ragteam.trainers.loop import check_run_folder

    quiet_libraries("bar" if sys.stderr.isatty() else "lines")
    adapters = role_adapters(args.adapter, args.lora_r or 16) if args.adapter else None
    out = check_run_folder(args.out, args.resume)
    if args.resume:
        check_resumed_args(out, args)
    roles = (None if args.roles == "all" else set(args.roles.split(",")) if args.roles else
             set(get_method(args.graph).sft_roles) or None if args.graph else
             None if args.explore else default_roles(args.traces))
    try:
        items, counts = select_calls(args, selectors, roles)
    except FileNotFoundError as error:
        raise ValueError(str(error)) from None
    print(json.dumps({"selected_calls": len(items), **counts}))
    if not items:
        print("sft_graph: no successful calls to learn from (lower --min-f1 or add traces)", file=sys.stderr)
        return 2
    if adapters is not None:  # a call of a role in no adapter would train nothing
        items = [e for e in items if adapters.adapter_of(e.role) != BASE]
        if not items:
            print("sft_graph: no selected calls of the adapters' roles", file=sys.stderr)
            return 2
    return train(args, items, adapters, out)


def train(args: argparse.Namespace, items: list, adapters, out: Path) -> int:
    """Epochs of SFT over ``items`` from the model (or resumed from ``out``), then the export."""
    import torch

    from ragteam.nodes.policies.spec import model_dir
    from ragteam.stores.owned import TRAINING, claim
    from ragteam.trainers.config import lora_settings
    from ragteam.trainers.learner.adapters import export_adapters
    from ragteam.trainers.learner.checkpoint import export_hf, latest_checkpoint, load_checkpoint
    from ragteam.trainers.learner.learner import shuffle_seed
    from ragteam.trainers.learner.model import PolicyValueModel, load_lm
    from ragteam.trainers.learner.optimizers import make_optimizer
    from ragteam.trainers.learner.sft_update import mean_nll, sft_epoch
    from ragteam.trainers.metrics_log import MetricsLog

    torch.manual_seed(args.seed)
    base = model_dir(args.model)
    lm, tokenizer = load_lm(base, lora_settings(args.lora_r) if args.lora_r and not adapters else None,
                            adapters=adapters)
    model = PolicyValueModel(lm)
    groups = {"groups": adapters.parameter_groups(model, args.lr, args.lr)} if adapters else {}
    optimizer = make_optimizer(args.optimizer, model, lr=args.lr, zero_stage=args.zero_stage, **groups)
    claim(out, TRAINING)
    saver = Checkpoints(out / "checkpoints", optimizer, args)
    checkpoint = latest_checkpoint(out / "checkpoints") if args.resume else None
    if checkpoint is not None:
        saver.resumed(load_checkpoint(checkpoint, optimizer))
    start, skip = saver.epochs_done, saver.minibatches_done
    log = MetricsLog(out, resume_step=start)
    pad = tokenizer.pad_token_id
    if start == 0 and skip == 0:
        # the starting point, on a fixed sample: over every call it cost a third of an epoch (new
        # adapters start as the identity, so whichever is active the model is the base one)
        sample = items if len(items) <= NLL_SAMPLE else random.Random(args.seed).sample(items, NLL_SAMPLE)
        log.write(0, {"nll": mean_nll(optimizer.module, sample, pad, args.micro_batch_tokens),
                      "nll_calls": len(sample)})
    for epoch in range(start + 1, args.epochs + 1):
        metrics = sft_epoch(optimizer, items, pad, args.minibatch_size, args.micro_batch_tokens,
                            seed=shuffle_seed(args.seed, epoch), skip=skip if epoch == start + 1 else 0,
                            adapters=adapters,
                            after_step=lambda taken, total: saver.after_step(epoch, taken, total))
        log.write(epoch, metrics)
        saver.save(epoch, 0)
        print(json.dumps({"epoch": epoch, **{k: round(v, 4) for k, v in metrics.items()}}))
    log.close()
    if adapters is not None:
        # the base by its absolute path: the export is served from wherever it is read
        export = export_adapters(lm, tokenizer, adapters, out / "adapters", str(Path(base).resolve()),
                                 optimizer.module.value_head.state_dict())
    else:
        export = export_hf(optimizer.module, tokenizer, out / "hf")
    print(f"model: {export}  metrics: {out / 'metrics.jsonl'}")
    return 0


def role_adapters(specs: list[str], rank: int):
    """The ``--adapter NAME=ROLE[,ROLE]`` options as ``RoleAdapters`` (each of rank ``rank``),
    held to the trainer's rules for ``adapters:`` (``trainers.config.adapter_options``)."""
    from ragteam.trainers.config import adapter_options
    from ragteam.trainers.learner.adapters import RoleAdapters

    return RoleAdapters(adapter_options(specs, rank))


NLL_SAMPLE = 64  # calls the step-0 NLL is measured on (all of them when fewer)


class Checkpoints:
    """When and what SFT saves: after every epoch, and within one on the trainer's adaptive
    cadence (``--save-every`` optimizer steps when given), so a fine-tune longer than a sitting
    resumes mid-epoch. A checkpoint is numbered by the optimizer steps taken and records the
    epochs finished (``cursor``) and the mini-batches of the next one already taken."""

    def __init__(self, root: Path, optimizer, args: argparse.Namespace):
        self.root, self.optimizer, self.args = root, optimizer, args
        self.epochs_done, self.minibatches_done, self.steps = 0, 0, 0
        self._last_write_s: float | None = None
        self._since = time.perf_counter()

    def resumed(self, state: dict) -> None:
        # a checkpoint from before mid-epoch saves holds epochs in both ``step`` and ``cursor``
        self.epochs_done, self.minibatches_done = state.get("cursor", state["step"]), state.get("minibatch", 0)
        self.steps = state["step"]
        where = f" and {self.minibatches_done} mini-batches of epoch {self.epochs_done + 1}" if self.minibatches_done else ""
        print(f"sft_graph: resumed after epoch {self.epochs_done}{where}", file=sys.stderr)

    def after_step(self, epoch: int, taken: int, total: int) -> None:
        """``taken`` of epoch ``epoch``'s ``total`` mini-batches are done; the last one is saved
        as the epoch's end."""
        from ragteam.trainers.loop import checkpoint_due

        self.steps += 1
        if taken < total and checkpoint_due(self.steps, self.args.save_every,
                                            time.perf_counter() - self._since, self._last_write_s):
            self.save(epoch - 1, taken)

    def save(self, epochs_done: int, minibatches_done: int) -> None:
        from ragteam.trainers.learner.checkpoint import save_checkpoint

        started = time.perf_counter()
        save_checkpoint(self.root, self.steps, self.optimizer,
                        {"cursor": epochs_done, "minibatch": minibatches_done, "args": vars(self.args)})
        self._last_write_s, self._since = time.perf_counter() - started, time.perf_counter()


# What a resumed SFT run may change: how long it runs and how often it saves. Everything else
# decides what it learns.
_RESUMABLE = {"epochs", "resume", "out", "save_every"}
_PATHS = {"traces", "explore", "selectors"}


def _resolved(paths: str | list[str]) -> list[str]:
    """A path flag's value as absolute paths (repeatable flags hold a list)."""
    return [str(Path(p).resolve()) for p in ([paths] if isinstance(paths, str) else paths)]


def check_resumed_args(out: Path, args: argparse.Namespace) -> None:
    """Refuse (``ValueError``, before any model loads) a ``--resume`` whose flags differ from
    those the run's newest checkpoint was started with, except ``--epochs``: a changed ``--lr``
    or ``--traces`` would silently train the rest of the run on other terms."""
    from ragteam.trainers.learner.checkpoint import latest_checkpoint, read_json

    checkpoint = latest_checkpoint(out / "checkpoints")
    state = read_json(checkpoint / "trainer.json") if checkpoint else {}
    saved = state.get("args") if isinstance(state, dict) else None
    if not isinstance(saved, dict):
        return  # no checkpoint yet (or one from before flags were saved): nothing to compare
    given = vars(args)
    for key in sorted(set(given) - _RESUMABLE):
        was, now = saved.get(key), given[key]
        if key in _PATHS and was is not None and now is not None:
            was, now = _resolved(was), _resolved(now)
        if key in saved and was != now:
            raise ValueError(f"--resume: the run in {out} was started with --{key.replace('_', '-')} "
                             f"{was!r}, not {now!r} (drop it to continue the run, or start a new run "
                             "with another --out)")


if __name__ == "__main__":
    sys.exit(main())
