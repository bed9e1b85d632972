"""The training loop (JADE Algorithm 2), one for every backend.

One step:

1. **rollouts** — the backend runs the method graph on the step's questions with the current
   weights (``samples_per_question`` runs each), here or in Ray workers;
2. **rewards** — the method's reward scheme scores every call of every run, and the calls become
   one buffer of mixed-role experience (``trainers.rollout.score_rollouts``); a run that raised
   is reported (``OUT/failed_runs.jsonl``) and left out, and the step trains on the others;
3. **learn** — the backend's learner fills rollout-time values (and reference log-probs), the
   advantages, and takes the PPO epochs on the shared model;
4. **sync** — the new weights reach the rollout engines (nothing to do when the learner's own
   module samples);
5. a metrics line for the step (every phase timed) and, when one is due (``checkpoint_due``), a
   checkpoint.

With asynchronous rollouts (``async.max_staleness: k`` > 0) the runs of the next k steps are
started as soon as the bound admits them (``Trainer.admit``) and go on during steps 2–5; a step
waits only for its own runs, whole (a question's group is trained when all its runs are back),
and none is dropped. ``k = 0`` is the synchronous step: a step's runs start when it does.

A backend (``trainers.backends``) provides those halves; ``Trainer`` owns everything else: the
questions and their order, the reward, the step counter and data cursor, metrics, checkpoints'
cadence, the export.
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Protocol, Sequence

import torch

from ragteam.graphs.methods import get_method, make_reward
from ragteam.stores.datasets import QAExample
from ragteam.stores.owned import MODEL, TRAINING, ForeignPathError, check_owned, claim, own_file, own_subdir
from ragteam.trainers.config import TrainConfig
from ragteam.trainers.engines import checked_engines
from ragteam.trainers.experience import Experience
from ragteam.trainers.metrics_log import MetricsLog
from ragteam.trainers.learner.checkpoint import write_json
from ragteam.trainers.rollout import Rollout, rollout_records, score_rollouts
from ragteam.trainers.weight_sync import WeightSync


class StartedRollouts(Protocol):
    """A step's runs, started by ``Backend.start_rollouts``."""

    def cancel(self) -> None:
        """Stop the runs (the trainer closed before they were trained)."""


class Backend(Protocol):
    """Where a step's halves run: this process (``embedded``) or Ray actors (``ray``)."""

    weight_sync: WeightSync  # its sync strategy; ``sent``: the last sync's own metrics

    def start_rollouts(self, examples: Sequence[QAExample], tag: str) -> StartedRollouts:
        """Begin every example's runs with the weights the engines hold now. With asynchronous
        rollouts (``async.max_staleness`` > 0) they run while the caller goes on (the learner
        updates, the engines take new weights between calls); otherwise they may wait for
        ``finish_rollouts``."""

    def finish_rollouts(self, started: StartedRollouts) -> tuple[list[Rollout], dict]:
        """Wait for started runs: every example's runs, in order, and the phase's own metrics."""

    def rollouts(self, examples: Sequence[QAExample], tag: str) -> tuple[list[Rollout], dict]:
        """``start_rollouts`` then ``finish_rollouts``."""

    def learn(self, items: list[Experience], step: int) -> dict:
        """Values, advantages and the PPO update on ``items`` (step is 0-based); its metrics."""

    def sync(self) -> float:
        """Push the learner's weights to the rollout engines; seconds taken."""

    def lr(self) -> float: ...

    def learner_logprobs(self, prompt_ids: list[int], completion_ids: list[int], temperature: float) -> list[float]:
        """The learner's log-probs of recorded ids (to check an engine against it)."""

    def engine_generate(self, requests) -> list:
        """Generations of a rollout engine for ``requests`` (to check it against the learner)."""

    def save(self, folder: Path, step: int, extra: dict) -> None: ...

    def resume(self, folder: Path) -> dict | None:
        """The saved state of the newest checkpoint under ``folder`` (loaded), or None."""

    def export(self, folder: Path) -> None: ...

    def close(self) -> None: ...


def load_examples(config: TrainConfig) -> list[QAExample]:
    """The training questions (the bundled dev sample by default), cut to ``limit``."""
    from ragteam.stores.datasets import read_dataset
    from ragteam.stores.demo import DEMO_QUESTIONS

    examples = read_dataset(config.data or DEMO_QUESTIONS).examples
    examples = examples[: config.limit] if config.limit else examples
    if not examples:
        raise ValueError("no training questions")
    return examples


def batch_at(n_examples: int, cursor: int, size: int, seed: int) -> list[int]:
    """Example indices for the ``size`` questions after ``cursor`` questions were consumed; each
    pass over the data uses its own seeded shuffle, so the order is a function of the cursor."""
    indices = []
    for position in range(cursor, cursor + size):
        epoch, offset = divmod(position, n_examples)
        order = list(range(n_examples))
        random.Random(seed * 100_003 + epoch).shuffle(order)
        indices.append(order[offset])
    return indices


def training_reward(config: TrainConfig):
    """The reward scheme (the method's own unless the config names one) and the roles it
    trains (the config's ``train_roles`` win)."""
    options, method = dict(config.reward), get_method(config.graph)
    reward = make_reward(options.pop("scheme", method.default_reward), method, **options)
    train_roles = set(config.train_roles) if config.train_roles is not None else reward.train_roles
    return reward, train_roles


def frozen_roles_of(config: TrainConfig) -> list[str]:
    """The roles the frozen initial copy plays (a property of the team): the config's choice,
    else the method's."""
    if config.frozen_roles is not None:
        return list(config.frozen_roles)
    return list(get_method(config.graph).frozen_roles)


def make_backend(config: TrainConfig, frozen_roles: list[str], engines: Sequence | None = None) -> Backend:
    """The configured backend, started (models loaded, actors up). ``engines``: started engines
    to use instead of starting them (``trainers.engines``: one ``RolloutEngine`` for the embedded
    backend, rollout workers for the Ray backend)."""
    given = checked_engines(engines, config.backend, config.sampler)
    if config.backend == "ray":
        from ragteam.trainers.backends.ray import RayBackend
        return RayBackend(config, frozen_roles, given or None)
    from ragteam.trainers.backends.embedded import EmbeddedBackend
    return EmbeddedBackend(config, frozen_roles, given[0] if given else None)


RUN_CONFIG = "run_config.json"
FAILED_RUNS = "failed_runs.jsonl"  # runs that raised, one record each, left out of their step
ROLLOUTS = "rollouts"  # step-NNNNNN.jsonl: each step's runs (``save_rollouts``)
CHECKPOINT_SHARE = 0.1  # adaptive cadence: checkpoints take at most about this share of a run


def checkpoint_due(step: int, save_every: int | None, since_save_s: float, last_save_s: float | None) -> bool:
    """Whether to save after ``step``: every ``save_every`` steps when set, else once the steps
    since the last checkpoint took (1 / CHECKPOINT_SHARE − 1) times as long as writing it did
    (a ~2 GB DeepSpeed checkpoint every minute-long step would otherwise be a third of the run)."""
    if save_every is not None:
        return step % save_every == 0
    return last_save_s is None or since_save_s >= (1 / CHECKPOINT_SHARE - 1) * last_save_s  # the run's whole config, written before its first step


def has_run(out: Path) -> bool:
    """Whether ``out`` already holds a training run (a metrics line or a checkpoint)."""
    return (out / "metrics.jsonl").exists() or (out / "checkpoints" / "latest").exists()


def check_run_folder(out: str | Path, resume: bool) -> Path:
    """Refuse, before any work, a run folder that is not ragteam's, an ``hf/`` export in it that
    is not ragteam's, without ``resume`` a folder that already holds a run, and with it a
    ``checkpoints/latest`` that points outside the run (PPO and SFT)."""
    from ragteam.trainers.learner.checkpoint import latest_checkpoint

    out = check_owned(out, TRAINING)
    if (out / "checkpoints").is_symlink():
        raise ForeignPathError(f"{out / 'checkpoints'} is a symbolic link; ragteam keeps a run's checkpoints "
                               "in a folder of the run's own (remove the link)")
    check_owned(out / "hf", MODEL, "--out (its hf/ folder)")
    check_owned(out / "adapters", MODEL, "--out (its adapters/ folder)")
    if not resume and has_run(out):
        raise ForeignPathError(f"{out} already holds a training run; continue it with --resume, "
                               "or choose another --out")
    if resume:
        latest_checkpoint(out / "checkpoints")  # here, not in a backend's actor: before any model loads
    return out


def claim_run_folder(config: TrainConfig, resume: bool) -> Path:
    """``config.out`` as this run's folder (``check_run_folder``), with the config saved there so
    that ``--resume`` restores it."""
    out = check_run_folder(config.out, resume)
    claim(out, TRAINING)
    write_json(out / RUN_CONFIG, config.to_dict())
    return out


def saved_config(out: str | Path) -> dict | None:
    """The config a run in ``out`` was started with (None when there is no run): its
    ``run_config.json``, else (runs from before that file) its newest checkpoint's. A config
    file that is there but unreadable or not a JSON object, or a run with no config at all, is a
    ``ValueError`` naming it: taken for "no run", the command's own config would be trained
    over this run's checkpoint."""
    from ragteam.trainers.learner.checkpoint import latest_checkpoint, read_json

    out = Path(out)
    where = out / RUN_CONFIG
    if where.exists() or where.is_symlink():
        try:
            saved = read_json(where)
        except OSError as error:
            raise ValueError(f"{where}: cannot read the run's config ({error.strerror or error})") from None
    else:
        checkpoint = latest_checkpoint(out / "checkpoints")
        if checkpoint is None:
            if has_run(out):
                raise ValueError(f"{out} holds a run but no {RUN_CONFIG} (nor a checkpoint's config) "
                                 "to resume it with; start a new run with another --out")
            return None
        where = checkpoint / "trainer.json"
        state = read_json(where)
        saved = state.get("config") if isinstance(state, dict) else state
    if not isinstance(saved, dict):
        raise ValueError(f"{where}: holds {json.dumps(saved)[:40]}, not the run's config (a JSON "
                         "object of options); restore it, or start a new run with another --out")
    return saved


def report_failed_runs(path: Path, step: int, failed: Sequence) -> None:
    """Runs that raised in a step: a line on stderr each (the first few) and a record in
    ``path``; the step trains on the others."""
    from ragteam.stores.jsonl import append_records

    append_records(own_file(path), [{"step": step, **asdict(run)} for run in failed])
    for run in failed[:3]:
        print(f"step {step}: run {run.sample} of question {run.question_id!r} failed and is left out "
              f"of the step: {run.error}", file=sys.stderr)
    if len(failed) > 3:
        print(f"step {step}: {len(failed) - 3} more failed runs, all in {path}", file=sys.stderr)


def save_rollouts(folder: Path, step: int, records: list[dict]) -> None:
    """A step's run records as ``folder/step-NNNNNN.jsonl``, written whole (a step run again
    after a kill replaces its file)."""
    from ragteam.stores.jsonl import write_records

    write_records(own_file(own_subdir(folder) / f"step-{step:06d}.jsonl"), records)


def step_figures(metrics: dict) -> dict[str, str]:
    """What a progress line shows of a step: reward, F1, format violations, losses, speed."""
    shown = {"reward": "{:.3f}", "f1": "{:.3f}", "format_violation_rate": "{:.2f}",
             "policy_loss": "{:.4g}", "value_loss": "{:.4g}", "tokens_per_s": "{:.0f}", "step_s": "{:.1f}"}
    names = {"format_violation_rate": "viol", "tokens_per_s": "tok/s", "step_s": "s"}
    return {names.get(k, k): fmt.format(metrics[k]) for k, fmt in shown.items() if k in metrics}


class NothingToTrain(RuntimeError):
    """A step's finished runs gave the learner nothing to update: a graph without model calls,
    or none of a trained role (see ``Trainer.train_step``)."""


class Trainer:
    """Joint PPO on one shared model for every role of a method graph, on either backend.
    ``engines``: rollout engines already started, used instead of starting new ones and kept by
    the caller (tests share them; see ``trainers.engines``)."""

    def __init__(self, config: TrainConfig, resume: bool = False, progress: str | bool = "lines",
                 engines: Sequence | None = None):
        from ragteam.stores.index import open_retriever

        self.config = config
        self.out = claim_run_folder(config, resume)
        self.progress = progress
        random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.examples = load_examples(config)
        self.reward, self.train_roles = training_reward(config)
        open_retriever(config.index)  # bad input fails here, before any model loads
        self.backend = make_backend(config, frozen_roles_of(config), engines)
        self.step, self.cursor = 0, 0
        self.target = config.steps  # the last step to start runs for (``train`` sets it)
        # steps whose runs started ahead (asynchronous rollouts): step → (started at, the step
        # whose weights the engines held then, the runs)
        self.in_flight: dict[int, tuple[float, int, StartedRollouts]] = {}
        state = self.backend.resume(self.out / "checkpoints") if resume else None
        if state is not None:
            self.step, self.cursor = state["step"], state["cursor"]
            self.backend.sync()
        self.log = MetricsLog(self.out, resume_step=self.step)

    def questions(self, step: int) -> list[QAExample]:
        """The questions of ``step`` (0-based; this one or one ahead of it)."""
        size = self.config.questions_per_step
        cursor = self.cursor + (step - self.step) * size
        return [self.examples[i] for i in batch_at(len(self.examples), cursor, size, self.config.seed)]

    def admit(self) -> None:
        """Start the runs of every step the staleness bound admits. The engines hold the weights
        of ``self.step`` (synced after the last update), so step s may start now if s − step ≤
        ``async.max_staleness`` — never past ``target``. A run is bounded when it starts
        (admission), so none is dropped after it finished: dropping late runs would keep the
        fast, easy questions and lose the slow ones."""
        last = max(min(self.target, self.step + self.config.async_.max_staleness + 1), self.step + 1)
        for step in range(self.step, last):
            if step not in self.in_flight:
                started = self.backend.start_rollouts(self.questions(step), tag=f"s{step + 1}")
                self.in_flight[step] = (time.perf_counter(), self.step, started)

    def train_step(self) -> dict:
        """One step (see the module docstring); its metrics."""
        config = self.config
        self.admit()
        started, synced_step, runs = self.in_flight.pop(self.step)
        waiting = time.perf_counter()
        rollouts, rollout_info = self.backend.finish_rollouts(runs)
        done = time.perf_counter()
        rollout_s = done - started  # from its start: with runs ahead, partly beside the last update
        failed = rollout_info.pop("failed", [])
        items, metrics, outcomes = score_rollouts(rollouts, self.reward, self.train_roles, rollout_s)
        # staleness: learner steps between the weights the runs started under and these
        metrics.update(rollout_info, failed_runs=len(failed), rollout_wait_s=done - waiting,
                       staleness=self.step - synced_step)
        if config.save_rollouts:
            save_rollouts(self.out / ROLLOUTS, self.step + 1, rollout_records(rollouts, outcomes))
        if failed:
            report_failed_runs(self.out / FAILED_RUNS, self.step + 1, failed)
        if rollouts and not items:
            self._nothing_to_train(rollouts)
        if items:
            started = time.perf_counter()
            metrics.update(self.backend.learn(items, self.step))
            metrics["learn_s"] = time.perf_counter() - started
            metrics["weight_sync_s"] = self.backend.sync()
            metrics.update(self.backend.weight_sync.sent)  # e.g. the adapters a sync sent
        metrics["lr"] = self.backend.lr()
        self.step += 1
        self.cursor += config.questions_per_step
        if config.async_.max_staleness:  # the next steps' runs go on while this step is logged and saved
            self.admit()
        return metrics

    def _nothing_to_train(self, rollouts: list[Rollout]) -> None:
        """Finished runs without one trained call. A graph that made no model calls at all can
        never train, and neither, most likely, can one whose first step trained nothing: both
        stop the run before any update (``NothingToTrain``) rather than log steps that learn
        nothing. Later, a step whose runs happened to skip the trained roles is only warned of."""
        calls = [t for r in rollouts for t in r.result.transitions]
        what = (f"made {len(calls)} model calls, none trained (roles "
                f"{', '.join(sorted({t.role for t in calls}))}; trained roles: "
                f"{', '.join(sorted(self.train_roles)) if self.train_roles is not None else 'all'})"
                if calls else "made no model calls (a graph of retrieval nodes alone has no model to train)")
        message = f"step {self.step + 1}: the {len(rollouts)} runs of graph {self.config.graph!r} {what}"
        if not calls or self.step == 0:
            raise NothingToTrain(f"{message}; nothing to train")
        print(f"warning: {message}; the step updates nothing", file=sys.stderr)

    def train(self, steps: int | None = None) -> list[dict]:
        """Steps until ``steps`` (default: the config's), one metrics line each, a checkpoint
        when due (``checkpoint_due``) and at the end, then the curve and the HF export."""
        from ragteam.graphs.apps.progress import Progress

        target = steps if steps is not None else self.config.steps
        self.target = target
        history = []
        mode = self.progress if isinstance(self.progress, str) else ("bar" if self.progress else "off")
        # a step takes minutes: off a terminal, one line per step (interval 0)
        bar = Progress(target, f"ppo {get_method(self.config.graph).name} ({self.config.backend})", "step",
                       mode, initial=min(self.step, target), interval=0.0)
        # A line is written before its step's checkpoint (a kill between the two then replays the
        # step, never loses its line), so each line's step_s runs from the previous line and
        # includes the checkpoint written after it (checkpoint_s): the lines add up to the run.
        last_line, checkpoint_s = time.perf_counter(), 0.0
        since_save_s, last_save_s = 0.0, None
        while self.step < target:
            metrics = self.train_step()
            metrics["checkpoint_s"] = checkpoint_s
            metrics["step_s"] = time.perf_counter() - last_line
            self.log.write(self.step, metrics)
            last_line, checkpoint_s = time.perf_counter(), 0.0
            since_save_s += metrics["step_s"]
            history.append(metrics)
            if checkpoint_due(self.step, self.config.save_every, since_save_s, last_save_s) or self.step == target:
                self.save()
                checkpoint_s = last_save_s = time.perf_counter() - last_line
                since_save_s = -checkpoint_s  # the next line's step_s includes this checkpoint
            bar.update(1, **step_figures(metrics))
        bar.close()
        self.log.plot()
        if self.config.export_hf:
            self.backend.export(self.out / self.config.export_name)
        return history

    def save(self) -> None:
        """A checkpoint of the learner plus the loop's own state (step, cursor, config)."""
        self.backend.save(self.out / "checkpoints", self.step,
                          {"cursor": self.cursor, "config": self.config.to_dict()})

    def close(self) -> None:
        """Stop runs started ahead, release the backend (engines, actors) and the metrics log;
        safe to call twice."""
        for _, _, runs in self.in_flight.values():
            runs.cancel()
        self.in_flight.clear()
        self.backend.close()
        self.log.close()
