"""HyperOFA's hypernetwork: from a token's set of matched word vectors to its SVD coordinate row.

Two encoders: the paper's BiLSTM over the word sequence, and a permutation-invariant set encoder (DeepSets: a
per-word MLP, masked mean pooling, an MLP). Loss: lambda * in-batch contrastive (InfoNCE over cosine / tau) +
(1 - lambda) * L1 normalized by the targets' mean magnitude, as in HyperOFA. Training keeps the weights of the best
validation loss and stops after `patience` epochs without improvement. All randomness comes from the seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from huggingface_hub.utils import tqdm
from torch import nn

__all__ = ["Encoder", "TrainResult", "predict", "train_hypernetwork"]

Encoder = Literal["bilstm", "set"]
_CONTRASTIVE_WEIGHT = 0.1  # lambda
_TEMPERATURE = 0.25  # tau
_LEARNING_RATE = 1e-3
_BATCH = 256
_VALIDATION = 0.05
_DROPOUT = 0.2


class _Hypernetwork(nn.Module):
    """Unit-norm word vectors in; outputs at the scale of the targets (`scale`, their RMS), so that the layers work
    at unit scale whatever the size of the coordinates (about 1 / sqrt(vocabulary size))."""

    def __init__(self, words: torch.Tensor, encoder: Encoder, hidden: int, out: int, scale: float) -> None:
        super().__init__()
        dim = words.shape[1]
        table = torch.cat([F.normalize(words.float(), dim=1), words.new_zeros(1, dim, dtype=torch.float32)])
        self.words = nn.Embedding.from_pretrained(table, freeze=True, padding_idx=len(words))
        self.register_buffer("scale", torch.tensor(float(scale), device=words.device))
        self.encoder = encoder
        if encoder == "bilstm":
            self.lstm = nn.LSTM(dim, hidden, batch_first=True, bidirectional=True)
        else:
            self.phi = nn.Sequential(nn.Linear(dim, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, 2 * hidden))
        self.head = nn.Sequential(nn.Linear(2 * hidden, 2 * out), nn.GELU(), nn.Dropout(_DROPOUT),
                                  nn.Linear(2 * out, out))
        self.out_features = out

    @property
    def device(self) -> torch.device:
        scale = self.scale
        assert isinstance(scale, torch.Tensor)
        return scale.device

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = self.words(ids)
        if self.encoder == "bilstm":
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            _, (state, _) = self.lstm(packed)
            z = torch.cat([state[-2], state[-1]], dim=1)
        else:
            lengths = lengths.to(ids.device)
            mask = (torch.arange(ids.shape[1], device=ids.device)[None, :] < lengths[:, None]).unsqueeze(-1)
            z = (self.phi(x) * mask).sum(dim=1) / lengths[:, None]
        return self.head(z) * self.scale


def _loss(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    logits = F.normalize(prediction, dim=1) @ F.normalize(target, dim=1).T / _TEMPERATURE
    contrastive = F.cross_entropy(logits, torch.arange(len(prediction), device=prediction.device))
    l1 = (prediction - target).abs().mean() / target.abs().mean().clamp_min(1e-12)
    return _CONTRASTIVE_WEIGHT * contrastive + (1 - _CONTRASTIVE_WEIGHT) * l1


def _pad(sets: list[torch.Tensor], pad: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded word ids on `device`, and the lengths (on the CPU, where `pack_padded_sequence` wants them).

    Word sets are index lists from NumPy: the batch is filled on the CPU and moved once.
    """
    lengths = torch.tensor([len(s) for s in sets], device="cpu")
    ids = torch.full((len(sets), int(lengths.max())), pad, dtype=torch.long, device="cpu")
    for row, words in enumerate(sets):
        ids[row, : len(words)] = words
    return ids.to(device), lengths


def _augment(words: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """With probability 1/2 (sets of more than 4 words): keep a random 50-100% of the words, in random order."""
    if len(words) <= 4 or torch.rand(1, generator=generator, device="cpu").item() < 0.5:
        return words
    keep = max(1, int(len(words) * (0.5 + 0.5 * torch.rand(1, generator=generator, device="cpu").item())))
    return words[torch.randperm(len(words), generator=generator, device="cpu")[:keep]]


def _batches(sets: list[torch.Tensor], generator: torch.Generator) -> list[torch.Tensor]:
    """Shuffled batches of similar lengths (groups of 20 batches sorted by length), so LSTMs pad little."""
    order = torch.randperm(len(sets), generator=generator, device="cpu")
    group = 20 * _BATCH
    batches: list[torch.Tensor] = []
    for start in range(0, len(order), group):
        chunk = order[start : start + group]
        chunk = chunk[torch.argsort(torch.tensor([len(sets[i]) for i in chunk], device="cpu"), stable=True)]
        batches.extend(chunk[i : i + _BATCH] for i in range(0, len(chunk), _BATCH))
    return [batches[i] for i in torch.randperm(len(batches), generator=generator, device="cpu")]


@dataclass(frozen=True)
class TrainResult:
    """A trained hypernetwork and how training went."""

    model: _Hypernetwork
    epochs: int
    best_validation_loss: float
    stopped_early: bool


def train_hypernetwork(word_vectors: torch.Tensor, sets: list[torch.Tensor], targets: torch.Tensor, *,
                       encoder: Encoder, hidden: int, max_epochs: int, patience: int, seed: int) -> TrainResult:
    """Train on (word set, coordinate row) pairs; keep the weights of the best validation loss.

    Randomness (weights, dropout, splits, augmentation) comes from `seed`; the global RNG is left as it was. It
    trains where `word_vectors` and `targets` are (weights are drawn on the CPU, then moved).
    """
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(sets), generator=generator, device="cpu")
    held = max(1, int(len(sets) * _VALIDATION))
    validation, training = order[:held], order[held:]
    pad, device = len(word_vectors), targets.device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        with torch.device("cpu"):
            model = _Hypernetwork(word_vectors, encoder, hidden, targets.shape[1],
                                  float(targets.pow(2).mean().sqrt()))
        model.to(device)
        optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=_LEARNING_RATE)
        best, best_state, since, epoch = float("inf"), None, 0, 0
        epochs = tqdm(range(1, max_epochs + 1), desc="HyperOFA: training hypernetwork", leave=False)
        for epoch in epochs:  # noqa: B007 (the last epoch run is reported after the loop)
            model.train()
            train_sets = [sets[i] for i in training]
            for batch in _batches(train_sets, generator):
                ids, lengths = _pad([_augment(train_sets[i], generator) for i in batch], pad, device)
                optimizer.zero_grad()
                _loss(model(ids, lengths), targets[training[batch]]).backward()
                optimizer.step()
            loss = _validation_loss(model, [sets[i] for i in validation], targets[validation], pad)
            if loss < best - 1e-6:
                best, best_state, since = loss, {k: v.clone() for k, v in model.state_dict().items()}, 0
            else:
                since += 1
                if since >= patience:
                    break
        model.load_state_dict(best_state if best_state is not None else model.state_dict())
    return TrainResult(model.eval(), epoch, best, since >= patience)


@torch.no_grad()
def _validation_loss(model: _Hypernetwork, sets: list[torch.Tensor], targets: torch.Tensor, pad: int) -> float:
    model.eval()
    return float(_loss(predict(model, sets, pad), targets))


@torch.no_grad()
def predict(model: _Hypernetwork, sets: list[torch.Tensor], pad: int) -> torch.Tensor:
    """Predictions for word sets, in batches (eval mode: no dropout)."""
    model.eval()
    device = model.device
    out = [model(*_pad(sets[i : i + _BATCH], pad, device)) for i in range(0, len(sets), _BATCH)]
    return torch.cat(out) if out else torch.zeros(0, model.out_features, device=device)
