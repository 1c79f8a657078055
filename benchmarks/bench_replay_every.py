"""How often the source replay reads: the default (one English sequence every `READ_EVERY` = 8 losses, weighted 8
times) against one every 4 losses at the same mean weight (the default before), with cross-entropy as the baseline.

`bench_languages.py`'s setting (SmolLM2, extend mode, `subword`, the recipe's vocabulary, 4 x 128 tokens per step),
its arms `cross-entropy` and `default`, and the arm `default, replay every 4`; held-out and English bits per byte,
seconds per step and cross-entropy at each arm's seconds, written as bench_languages.py writes them
(benchmarks/results/languages_<language>_replay.md). Run the arms in turns (`--lockstep`): the difference in
seconds is a few percent.

    python benchmarks/bench_replay_every.py --languages vi de --steps 25 50 100 --baseline-steps 125 150 \\
        --arms cross-entropy default 'default, replay every 4' --seeds --lockstep --suffix _replay
"""

from __future__ import annotations

import bench_languages

from vocabshift.training import DistillationWeights

EVERY_4 = DistillationWeights()  # the default's weights; told apart by identity in make_trainer
bench_languages.ARMS["default, replay every 4"] = ("English kept for the target", EVERY_4)
_make_trainer = bench_languages.make_trainer


def make_trainer(setting, model, tokenizer, weights, args, texts, callbacks):
    """bench_languages' trainer; for `default, replay every 4` its replay reads every 4 losses (weighted 4 times)."""
    trainer = _make_trainer(setting, model, tokenizer, weights, args, texts, callbacks)
    if weights is EVERY_4 and trainer.source is not None:
        trainer.source.every = 4
    return trainer


bench_languages.make_trainer = make_trainer

if __name__ == "__main__":
    bench_languages.main()
