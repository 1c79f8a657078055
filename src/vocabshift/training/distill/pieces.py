"""The old pieces each student token counts for: its first (`next_piece`), and the prefix tree of all of them
(`piece_tree`).

`next_piece_loss` tells the student how much probability each group of tokens sharing a first old piece should get,
but not how to split it inside the group, and with a byte-level BPE a first piece is often one letter. The teacher
knows the rest of the split along the text: one old position further, its distribution over the second piece given
the first; further still, over the third given the first two. `PieceTree` is the prefix tree of the student's
tokens by their old pieces (extend mode: an old token is its own one piece). Every node is a prefix; its subtree is
a contiguous range of the tokens sorted by their pieces; its slots are "stops here" (the token whose pieces are the
prefix, if any) and one per child piece.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from ...packing import unpack_ids
from ...record import ExtensionRecord

__all__ = ["PieceTree", "first_pieces", "piece_tree"]


@dataclass(frozen=True)
class PieceTree:
    """Tables of the prefix tree (node 0 is the root, the empty prefix; `-1` pads). Built by `piece_tree`.

    Attributes:
        order (`(tokens,)`): student ids with at least one piece, sorted by their pieces.
        child_keys (`(nodes - 1,)`): `parent * (old vocabulary + 1) + piece` of every other node, sorted.
        child_nodes (`(nodes - 1,)`): the node of each key.
        start, size (`(nodes,)`): each node's subtree, `order[start : start + size]`.
        child_pieces (`(nodes, max children + 1)`): the piece of each slot from 1 on (slot 0: "stops here"; the
            root's row is empty: its split is `next_piece`'s).
        has_stop (`(nodes,)`): whether a token's pieces are exactly the node's prefix.
        slots (`(tokens, depth + 1)`): for the token at each sorted position, its slot in its depth-`d` ancestor.
        base (`int`): the old vocabulary's size + 1, the multiplier of `child_keys`.
    """

    order: torch.Tensor
    child_keys: torch.Tensor
    child_nodes: torch.Tensor
    start: torch.Tensor
    size: torch.Tensor
    child_pieces: torch.Tensor
    has_stop: torch.Tensor
    slots: torch.Tensor
    base: int

    @property
    def depth(self) -> int:
        return self.slots.shape[1] - 1

    def to(self, device: torch.device | str) -> PieceTree:
        tensors = {f.name: getattr(self, f.name).to(device) for f in fields(self) if f.name != "base"}
        return PieceTree(**tensors, base=self.base)

    def child(self, nodes: torch.Tensor, pieces: torch.Tensor) -> torch.Tensor:
        """The child of each node by each piece; -1 where there is none (or the node is -1)."""
        keys = nodes * self.base + pieces
        found = torch.searchsorted(self.child_keys, keys).clamp(max=len(self.child_keys) - 1)
        return torch.where((self.child_keys[found] == keys) & (nodes >= 0), self.child_nodes[found], -1)


def first_pieces(record: ExtensionRecord, rows: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """For every row of the extended model, the old id whose probability it counts for in `next_piece_loss`: the
    old token it copies (extend mode: itself), the first piece of a new token's decomposition, or
    `record.old_vocab_size` (no old token: padding rows, tokens the old tokenizer cannot write)."""
    table = np.full(rows, record.old_vocab_size, dtype=np.int64)
    pairs = np.asarray(record.shared_pairs(), dtype=np.int64).reshape(-1, 2)
    table[pairs[:, 0]] = pairs[:, 1]
    lengths = np.asarray(unpack_ids(record.decompositions["lengths"]), dtype=np.int64)
    flat = np.asarray(unpack_ids(record.decompositions["ids"]), dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    new_ids = np.asarray(record.new_ids, dtype=np.int64)
    table[new_ids[lengths > 0]] = flat[starts[lengths > 0]]
    return torch.from_numpy(table).to(device)


def piece_tree(record: ExtensionRecord, rows: int, device: torch.device | str = "cpu") -> PieceTree:
    """The prefix tree of the extended model's `rows` ids by their old pieces (setup only: a Python pass over the
    vocabulary, nothing per training step)."""
    sequences = _sequences(record, rows)
    order = sorted(sequences, key=sequences.__getitem__)
    nodes, start, size, stops, children = _nodes([sequences[token] for token in order])
    base = record.old_vocab_size + 1
    keyed = sorted((nodes[prefix[:-1]] * base + prefix[-1], node) for prefix, node in nodes.items() if prefix)
    # the root's slots are next_piece's: not kept; slot 1 always exists (-1 where no node splits), which the walk reads
    width = max(1, *map(len, children[1:])) + 1
    child_pieces = np.full((len(start), width), -1, dtype=np.int64)
    for node, ranks in enumerate(children[1:], 1):
        child_pieces[node, 1 : len(ranks) + 1] = list(ranks)
    keys, kids, starts, sizes = (torch.tensor(v, dtype=torch.int64, device="cpu") for v in
                                 ([k for k, _ in keyed], [n for _, n in keyed], start, size))
    slots = _slots([sequences[token] for token in order], nodes, children)
    return PieceTree(torch.tensor(order, dtype=torch.int64, device="cpu"), keys, kids, starts, sizes,
                     torch.from_numpy(child_pieces), torch.tensor(stops, device="cpu"), torch.from_numpy(slots),
                     base).to(device)


def _nodes(sorted_pieces: list[tuple[int, ...]]) -> tuple[dict[tuple[int, ...], int], list[int], list[int],
                                                          list[bool], list[dict[int, int]]]:
    """Every prefix's node, and per node: its first sorted position, subtree size, whether a token stops there and
    its children (piece -> rank)."""
    nodes: dict[tuple[int, ...], int] = {(): 0}
    start, size, stops, children = [0], [len(sorted_pieces)], [False], [dict[int, int]()]
    for position, pieces in enumerate(sorted_pieces):
        for depth in range(1, len(pieces) + 1):
            if pieces[:depth] not in nodes:
                nodes[pieces[:depth]] = len(start)
                start.append(position)
                size.append(0)
                stops.append(False)
                children.append({})
                siblings = children[nodes[pieces[: depth - 1]]]
                siblings[pieces[depth - 1]] = len(siblings)
            size[nodes[pieces[:depth]]] += 1
        stops[nodes[pieces]] = True
    return nodes, start, size, stops, children


def _slots(sorted_pieces: list[tuple[int, ...]], nodes: dict[tuple[int, ...], int],
           children: list[dict[int, int]]) -> np.ndarray:
    """`(tokens, depth + 1)`: each token's slot in its ancestor at each depth (0 where it stops, -1 past it)."""
    slots = np.full((len(sorted_pieces), max(map(len, sorted_pieces), default=0) + 1), -1, dtype=np.int64)
    for position, pieces in enumerate(sorted_pieces):
        for depth in range(len(pieces)):
            slots[position, depth] = 1 + children[nodes[pieces[:depth]]][pieces[depth]]
        slots[position, len(pieces)] = 0
    return slots


def _sequences(record: ExtensionRecord, rows: int) -> dict[int, tuple[int, ...]]:
    """The old pieces of every student id that has some: an old token (or the new id that copies it) is its one
    piece, a new token its decomposition."""
    sequences: dict[int, tuple[int, ...]] = {new: (old,) for new, old in record.shared_pairs() if new < rows}
    for token, pieces in zip(record.new_ids, record.decomposition_lists()):
        if pieces:
            sequences[token] = tuple(pieces)
    return sequences
