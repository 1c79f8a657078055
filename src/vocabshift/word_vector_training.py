"""Train fastText vectors of words or tokens on a corpus, in a fresh one-thread process (reproducible), cached by the
corpus's fingerprint and the settings; `wordvectors` loads them.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

from huggingface_hub.utils import are_progress_bars_disabled, tqdm

from ._typing import Corpus, Tokenizer, TokenizerLike
from .arguments import check_choice, check_count, check_output_path
from .corpus import corpus_fingerprint, documents
from .errors import CorpusError, InvalidArgumentError
from .vocab.forms import backend_state, detect_family
from .vocab.load import fingerprint, load_tokenizer
from .wordvectors import WordVectors, load_word_vectors

__all__ = ["default_cache_dir", "train_word_vectors"]

_BATCH = 1000
_CACHE_FORMAT = 1  # bump when the cached files change meaning
_TRAIN_SCRIPT = """
import json, sys
import fasttext
try:
    fasttext.train_unsupervised(**json.loads(sys.argv[1])).save_model(sys.argv[2])
except (RuntimeError, ValueError) as error:  # e.g. an empty vocabulary after min_count
    print(error)
    sys.exit(1)
except MemoryError:  # std::bad_alloc: (words + bucket) x dim floats do not fit
    sys.exit(3)
"""
_OUT_OF_MEMORY = 3
_C_INT = 2**31  # fastText's settings are C ints


def default_cache_dir() -> Path:
    """`$VOCABSHIFT_CACHE/fasttext`, by default `~/.cache/vocabshift/fasttext`."""
    return Path(os.environ.get("VOCABSHIFT_CACHE", Path.home() / ".cache" / "vocabshift")).expanduser() / "fasttext"


def train_word_vectors(
    corpus: Corpus,
    *,
    tokenizer: TokenizerLike | None = None,
    dim: int = 100,
    epochs: int = 3,
    min_count: int = 10,
    bucket: int = 100_000,
    model: Literal["cbow", "skipgram"] = "cbow",
    cache_dir: str | os.PathLike | None = None,
) -> WordVectors:
    """Train fastText vectors on `corpus` (or load them from the cache), at token level if `tokenizer` is given.

    At token level each document is cut into tokens by `tokenizer` and the tokens' strings are the words, as FOCUS
    trains its auxiliary model; at word level the text is used as is. fastText runs with one thread in a fresh
    process, which makes it reproducible, with CBOW and 10 negatives like FOCUS; `bucket` is much smaller than
    fastText's 2M so that models stay tens of MB.

    Args:
        corpus: a path to a UTF-8 text file (one document per line) or a list of strings.
        tokenizer (*optional*): a fast tokenizer (or its path, as for `extend_vocabulary`); given, the vectors are
            token level.
        dim (`int`, defaults to 100): fastText's vector size.
        epochs (`int`, defaults to 3): fastText's passes over the corpus.
        min_count (`int`, defaults to 10): words seen fewer times get no vector, so that rare tokens are flagged
            instead of getting noise.
        bucket (`int`, defaults to 100_000): fastText's hash buckets for character n-grams.
        model (`str`, defaults to `"cbow"`): `"cbow"` or `"skipgram"`.
        cache_dir (*optional*): where trained models are kept; defaults to `$VOCABSHIFT_CACHE/fasttext`
            (`~/.cache/vocabshift/fasttext`).

    Returns:
        `WordVectors`

    Raises:
        `CorpusError`: if the corpus is empty, not text or not UTF-8, or too small for `min_count`.
        `InvalidTokenizerError`, `TokenizerLoadError`: `tokenizer` is not a fast tokenizer (or its path).
        `InvalidArgumentError`: a count below 1 or another `model` (`InvalidArgumentTypeError`: not an int), a
            `cache_dir` that is a file or cannot be written.

    Example:
        ```python
        >>> vectors = vocabshift.train_word_vectors("ru.txt", tokenizer=ru_tokenizer)
        >>> model.extend_vocabulary(ru_tokenizer, method="focus", word_vectors=vectors)
        ```
    """
    for name, count in (("dim", dim), ("epochs", epochs), ("min_count", min_count), ("bucket", bucket)):
        if check_count(count, name=name, accepted="an int in [1, 2**31)") >= _C_INT:
            raise InvalidArgumentError(f"{name}={count!r} is invalid: pass an int in [1, 2**31) (fastText's range).")
    check_choice(model, ("cbow", "skipgram"), name="model")
    folder = default_cache_dir() if cache_dir is None else check_output_path(cache_dir, name="cache_dir").expanduser()
    if folder.exists() and not folder.is_dir():
        raise InvalidArgumentError(f"cache_dir={str(cache_dir)!r} is a file: pass a folder to keep trained models in.")
    loaded = None if tokenizer is None else load_tokenizer(tokenizer, argument="tokenizer")
    settings = {"model": model, "dim": dim, "epoch": epochs, "minCount": min_count, "neg": 10, "bucket": bucket}
    corpus_sha, count = corpus_fingerprint(corpus)
    meta = {"format": _CACHE_FORMAT, "corpus_sha256": corpus_sha, "documents": count, "settings": settings,
            "level": "token" if loaded is not None else "word", "family": None, "tokenizer_sha256": None}
    if loaded is not None:
        meta["family"], meta["tokenizer_sha256"] = detect_family(backend_state(loaded)), fingerprint(loaded)
    key = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:24]
    path = folder / f"{meta['level']}-{key}.bin"
    if not path.exists():
        _train(corpus, loaded, settings, meta, path)
    return load_word_vectors(path)


def _train(corpus: Any, tokenizer: Tokenizer | None, settings: dict[str, Any], meta: dict[str, Any], path: Path
           ) -> None:
    """Write the (tokenized) corpus to a temporary file, train, then move model and metadata into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".train-") as folder:
        text, model = Path(folder) / "corpus.txt", Path(folder) / "model.bin"
        _write_training_text(corpus, tokenizer, text, meta["documents"])
        verbose = 0 if are_progress_bars_disabled() else 2
        arguments = json.dumps({"input": str(text), "thread": 1, "verbose": verbose, **settings})
        # fastText initializes only thread/10 of its input matrix (fasttext's DenseMatrix::uniform) and leaves the
        # rest as allocated: in a fresh process with a fixed mmap threshold that memory is zeroed, so one-thread
        # training is reproducible; in a busy process it can hold garbage (NaN, run-to-run differences).
        environment = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        result = subprocess.run([sys.executable, "-c", _TRAIN_SCRIPT, arguments, str(model)], env=environment,
                                stdout=subprocess.PIPE, text=True, check=False)
        _check_run(result, settings, meta["documents"])
        Path(folder, "model.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
        os.replace(Path(folder) / "model.json", path.with_suffix(".json"))
        os.replace(model, path)


def _check_run(result: subprocess.CompletedProcess[str], settings: dict[str, Any], documents: int) -> None:
    """Raise for a failed fastText run: out of memory (its `std::bad_alloc`, or SIGKILL as the kernel's OOM killer
    sends) is the settings' fault, anything else the corpus's."""
    if result.returncode in (_OUT_OF_MEMORY, -signal.SIGKILL):
        how = "ran out of memory" if result.returncode > 0 else "was killed (SIGKILL, as when memory runs out)"
        raise InvalidArgumentError(
            f"fastText {how}: its matrices hold (words + bucket) x dim floats, with bucket={settings['bucket']} and "
            f"dim={settings['dim']}. Pass a smaller dim or bucket."
        )
    if result.returncode:
        raise CorpusError(
            f"fastText could not train on the corpus ({documents} documents): {result.stdout.strip()} "
            f"Pass more text, or a smaller min_count (now {settings['minCount']}): extend_vocabulary's corpus= option "
            "takes none, so there train the vectors with train_word_vectors(corpus, tokenizer=new_tokenizer, "
            "min_count=...) and pass them as word_vectors=."
        )


def _write_training_text(corpus: Any, tokenizer: Tokenizer | None, text: Path, count: int) -> None:
    backend = tokenizer.backend_tokenizer if tokenizer is not None else None
    desc = "Tokenizing corpus for fastText" if backend else "Writing corpus for fastText"
    with text.open("w", encoding="utf-8") as out, tqdm(total=count, desc=desc, leave=False) as bar:
        batch: list[str] = []
        for document in documents(corpus):
            if document.strip():
                batch.append(document)
            if len(batch) == _BATCH:
                _write_batch(out, batch, backend)
                bar.update(len(batch))
                batch = []
        _write_batch(out, batch, backend)
        bar.update(len(batch))


def _write_batch(out: Any, batch: list[str], backend: Any) -> None:
    if backend is None:
        out.writelines(document.replace("\n", " ") + "\n" for document in batch)
        return
    for encoding in backend.encode_batch(batch, add_special_tokens=False):
        out.write(" ".join(encoding.tokens) + "\n")
