"""The previous design of `rows="new"`, kept only as the benchmarks' baseline: the whole embedding matrices train,
gradient hooks zero the frozen rows' gradients, and a saved copy of the frozen rows is written back after every
optimizer step (to undo AdamW's decoupled weight decay). The optimizer holds state for every row."""

from __future__ import annotations

import torch

from vocabshift.training.cpt import freeze_body


class MaskedRows:
    def __init__(self, model, ids: torch.Tensor) -> None:
        self.parameters = freeze_body(model)
        self._saved, self._hooks = [], []
        for parameter in self.parameters:
            train = torch.zeros(parameter.shape[0], dtype=torch.bool, device=parameter.device)
            train[ids.to(parameter.device)] = True
            frozen = (~train).nonzero().squeeze(1)
            self._saved.append((frozen, parameter.detach()[frozen].clone()))
            self._hooks.append(parameter.register_hook(lambda grad, keep=train: grad.masked_fill(~keep[:, None], 0)))

    @torch.no_grad()
    def restore(self) -> None:
        for parameter, (frozen, values) in zip(self.parameters, self._saved):
            parameter.index_copy_(0, frozen, values)
