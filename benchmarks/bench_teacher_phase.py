"""How long the teacher reads before its schedule turns it down, seed by seed: every reading's lead on the text.

`TeacherSchedule` keeps the teacher reading a share of the sequences until its lead on the whole text turns
negative (`TeacherSchedule.text_lead`: how far the teacher's loss is below the student's, as a share of the
student's; each reading measures it on the sequence the teacher read, `teacher_text_lead`). This trains
bench_languages.py's `default` arm (SmolLM2, extend mode, `subword`, the recipe's vocabulary, 4 x 128 tokens per step)
for `--steps` steps per seed and records each step where the teacher read: the lead it measured there, the
schedule's text lead after it, and the share after it (the JSON); the table gives the steps, where the schedule's
text lead first turned negative and the spread of the leads measured. No baseline: it counts readings (what each
costs against a cross-entropy step is bench_step_cost.py's table).

    python benchmarks/bench_teacher_phase.py [--languages vi de] [--seeds 0 1] [--steps 30] [--suffix _rates]

Writes benchmarks/results/teacher_phase<suffix>.md / .json (a language's runs replace its earlier ones).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bench_languages import prepare_arm, setting_for

RESULTS = Path(__file__).parent / "results"


def readings(setting, seed, steps) -> list[dict]:
    """Each teacher reading of a `default` run: step, measured text lead, the schedule's after it, the share."""
    run = prepare_arm(setting, "default", [steps], seed)
    trainer, found = run["trainer"], []
    schedule, update = trainer.schedule, trainer.schedule.update

    def recorded(lead, text_lead=None):
        update(lead, text_lead)
        if text_lead is not None:
            found.append({"step": trainer.state.global_step, "text_lead": text_lead,
                          "running": schedule.text_lead, "share": schedule.share})

    schedule.update = recorded  # the instance's own method, wrapped for this run only
    trainer.train()
    run["work"].cleanup()
    return found


def table(results) -> list[str]:
    lines = ["| language | seed | readings | steps read | schedule's text lead first negative at step | leads "
             "measured: mean, st. dev. |", "|---|---|---|---|---|---|"]
    for language, seeds in results.items():
        for seed, found in seeds.items():
            leads = [r["text_lead"] for r in found]
            down = next((r["step"] for r in found if r["running"] <= 0), "not within the run")
            spread = f"{statistics.mean(leads):+.3f}, {statistics.stdev(leads):.3f}" if len(leads) > 1 else "-"
            lines.append(f"| {language} | {seed} | {len(found)} | {', '.join(str(r['step']) for r in found)} | "
                         f"{down} | {spread} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--languages", nargs="+", default=["vi", "de"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--suffix", default="", help="appended to the results' file names, to keep another run's")
    options = parser.parse_args()
    path = RESULTS / f"teacher_phase{options.suffix}.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    for language in options.languages:
        setting = setting_for(language)
        results[language] = {str(seed): readings(setting, seed, options.steps) for seed in options.seeds}
    path.write_text(json.dumps(results, indent=1))
    command = " ".join(["python benchmarks/bench_teacher_phase.py", *sys.argv[1:]])
    text = "\n".join(["# When the teacher stops reading", "",
                      f"The `default` arm of bench_languages.py for {options.steps} steps per seed; each step where "
                      "the teacher read one sequence, the lead it measured on that sequence's text (share of the "
                      "student's loss), and the step where the schedule's text lead (`TeacherSchedule.text_lead`) "
                      "first turned negative (the teacher then reads a sixty-fourth of its share).", "",
                      *table(results), "",
                      f"Command (last run): `{command}`", ""])
    path.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
