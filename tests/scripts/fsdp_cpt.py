"""Run by tests/test_training_fsdp.py under `torchrun --nproc_per_node 2` (gloo, CPU): embedding-only CPT with the
body sharded by FSDP2, in a plain loop over the library's functions.

Arguments: output folder, then model folders (each: an extended model + blocks.pt). For each model every rank takes
its half of each global batch: first one backward and one SGD step (the trainable rows' gradients and parameters,
gathered), then AdamW steps; rank 0 writes those, the full state dict taken before `fold()` (the state-dict hook
folds) and after it, and what the parameters were.
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM

from vocabshift.training.cpt import freeze_for_embedding_training, row_norms

STEPS, BATCH = 3, 4


def full_state(model) -> dict:
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def gathered(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach().clone()


def first_step(model, trainable, ids) -> dict:
    """One backward and one SGD step (lr 1): the trainable rows' gradients and parameters after it, gathered."""
    model(input_ids=ids, labels=ids).loss.backward()
    gradients = [gathered(p.grad) for p in trainable.parameters]
    torch.optim.SGD(trainable.parameters, lr=1.0).step()
    for parameter in trainable.parameters:
        parameter.grad = None
    return {"gradients": gradients, "after_sgd": [gathered(p) for p in trainable.parameters]}


def train(folder: Path, rank: int, world: int) -> dict:
    model = AutoModelForCausalLM.from_pretrained(folder).train()
    blocks = torch.load(folder / "blocks.pt")
    trainable = freeze_for_embedding_training(model, rows="new")
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(trainable.parameters, lr=1e-2, weight_decay=0.1)
    share = BATCH // world
    batches = [torch.stack([b["input_ids"] for b in blocks[s * BATCH:(s + 1) * BATCH]]) for s in range(STEPS + 1)]
    shares = [batch[rank * share:(rank + 1) * share] for batch in batches]
    report = first_step(model, trainable, shares[0])
    for ids in shares[1:]:
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    report |= {"sharded": all(isinstance(p, DTensor) for p in trainable.parameters),
               "body_sharded": isinstance(model.model.layers[0].mlp.up_proj.weight, DTensor),
               "norms_split": row_norms(model, trainable.ids), "before_fold": full_state(model)}
    trainable.fold()
    report |= {"norms_folded": row_norms(model, None), "after_fold": full_state(model)}
    return report


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    output, folders = Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]]
    for folder in folders:
        report = train(folder, rank, world)
        if rank == 0:
            torch.save(report | {"world_size": world}, output / f"{folder.name}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
