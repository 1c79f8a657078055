"""Stop a run whose trained weights turned NaN or infinite, before the Trainer logs, saves or returns them.

A learning rate too high for the run (or an overflow in half precision) writes NaN or infinite values into the rows
that train; the Trainer's logs hide NaN losses (`logging_nan_inf_filter`), so the run would end with a model whose
new rows are unusable, and say nothing. One sum over the trained parameters per step tells (NaN and infinity
survive a sum), summed over the processes of a distributed run so that all of them stop at the same step.
"""

from __future__ import annotations

import math

import torch
from transformers import TrainingArguments

from ...errors import TrainingDivergedError

__all__ = ["check_finite"]


def check_finite(parameters: list[torch.nn.Parameter], args: TrainingArguments, step: int) -> None:
    """Refuse to go on once a trained value is NaN or infinite.

    Raises:
        `TrainingDivergedError`: naming the step, how many rows hold such values and the fixes.
    """
    local = [_local(parameter) for parameter in parameters]
    total = torch.zeros((), dtype=torch.float32, device=args.device)
    for tensor in local:
        total += tensor.sum(dtype=torch.float32).to(total.device)
    if args.world_size > 1:
        torch.distributed.all_reduce(total)
    if math.isfinite(float(total)):
        return
    rows = sum(int((~torch.isfinite(t)).reshape(len(t), -1).any(dim=1).sum()) for t in local if t.dim() and len(t))
    where = f" ({rows} in process {torch.distributed.get_rank()}'s shards)" if args.world_size > 1 else ""
    raise TrainingDivergedError(
        f"Training diverged at step {step}: {rows if not where else 'some'} trained rows{where} hold NaN or infinite "
        f"values after its optimizer step, so the trained weights are lost. Start again from "
        f"the model (or a checkpoint saved before step {step}) {_fix(args)}"
    )


def _fix(args: TrainingArguments) -> str:
    """What to change: a weight decay above 1 where AdamW's decoupled decay alone flips or grows the weights (it
    scales them by 1 - learning_rate x weight_decay each step), else the learning rate and what tames a step."""
    if args.weight_decay > 1 and args.learning_rate * args.weight_decay >= 1:
        return (f"with a weight_decay below 1 / learning_rate (0 to 0.1 is usual): weight_decay={args.weight_decay:g} "
                f"with learning_rate={args.learning_rate:g} makes AdamW scale each weight by "
                f"{1 - args.learning_rate * args.weight_decay:g} per step.")
    return (f"with a lower learning_rate than {args.learning_rate:g}, or with warmup_steps or max_grad_norm; where "
            "float16 overflows (a float16 model or teacher, fp16=True), train in bfloat16 or float32.")


def _local(parameter: torch.nn.Parameter) -> torch.Tensor:
    """This process's values (its shard of a parameter FSDP2 shards)."""
    data = parameter.detach()
    return data.to_local() if hasattr(data, "to_local") else data
