"""Training runs that take turns, one step each, in threads of one process.

Runs of one arm minutes apart can differ by several percent in seconds per step on a shared machine, as much as the
arms differ. Runs that alternate step by step meet the same drift, so their clocks compare. Each run trains in its
own thread and steps only while it holds the turn (the others wait, so the cores are never shared); its clock
(`TakingTurns`, a `Checkpoints`) runs only then: from taking the turn to its step's end, the next batch's collation
included, the held-out scoring at a checkpoint excluded.
"""

from __future__ import annotations

import threading
import time

from bench_distill import Checkpoints


class Turns:
    """Whose step is next among named runs, in the order given; a finished run drops out."""

    def __init__(self, names):
        self.order, self.turn, self.done = list(names), names[0], set()
        self.condition = threading.Condition()
        self.started = threading.Barrier(len(self.order))  # no run steps while another still sets up its training

    def begin(self, name) -> None:
        """Wait until every run is ready to train, then for this run's turn."""
        self.started.wait()
        self.wait(name)

    def wait(self, name) -> None:
        with self.condition:
            self.condition.wait_for(lambda: self.turn == name)

    def pass_on(self, name) -> None:
        """Give the turn to the next run still training, and wait for it to come back."""
        self._advance(name)
        self.wait(name)

    def finish(self, name) -> None:
        with self.condition:
            self.done.add(name)
        self._advance(name)

    def _advance(self, name) -> None:
        with self.condition:
            start = self.order.index(name)
            after = [self.order[(start + k) % len(self.order)] for k in range(1, len(self.order) + 1)]
            self.turn = next((other for other in after if other not in self.done), self.turn)
            self.condition.notify_all()


class TakingTurns(Checkpoints):
    """`Checkpoints` of a run that takes turns (`Turns`): it trains and its clock runs only while it holds the turn."""

    def __init__(self, turns, name, *args):
        super().__init__(*args)
        self.turns, self.name = turns, name

    def on_train_begin(self, args, state, control, **kwargs):
        self.turns.begin(self.name)
        super().on_train_begin(args, state, control, **kwargs)

    def on_step_end(self, args, state, control, **kwargs):
        super().on_step_end(args, state, control, **kwargs)  # the clock stops, a checkpoint is scored
        self.turns.pass_on(self.name)
        self._start = time.perf_counter()


def train_in_turns(turns, trainers) -> None:
    """Train each of the `{name: trainer}` (built with `TakingTurns` of `turns`, over the same names) in its own
    thread until all are done; the first error, if any, is raised after all have stopped."""
    errors = []

    def train(name, trainer):
        try:
            trainer.train()
        except BaseException as error:  # re-raised below, once the other runs have stopped too
            errors.append(error)
            turns.started.abort()  # runs still waiting to begin stop (BrokenBarrierError)
        finally:
            turns.finish(name)

    threads = [threading.Thread(target=train, args=(name, trainer)) for name, trainer in trainers.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    causes = [error for error in errors if not isinstance(error, threading.BrokenBarrierError)]
    if errors:
        raise (causes or errors)[0]
