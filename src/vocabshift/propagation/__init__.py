"""LEP (Learned Embedding Propagation, arXiv 2412.21140) on safetensors shards, streaming.

`sources` (local folder or Hub repo, where the embedding tensors are) -> `checks` (siblings, lineage per the
record) and `lineage` (per the rows themselves) -> `plan` (output vocabulary and where each row comes from) ->
`fit` (the map W) -> `shards` (rows read with pread, shards copied or rewritten tensor by tensor) -> `outputs`
(config, generation config, index, record).
"""

from .core import propagate, read_input_embeddings
from .fit import METHODS

__all__ = ["METHODS", "propagate", "read_input_embeddings"]
