"""Ranking (SPEC §6): vector, keyword, recency and importance fused into one list.

    relevance = w_vector·vector + w_keyword·keyword + w_recency·recency + w_importance·importance
    final = (relevance + NEIGHBOUR_WEIGHT·neighbour) × (1 + ENTITY_WEIGHT·entity) × (1 + TIME_WEIGHT·time)
            × length × specificity × effective confidence × (0.5 if stale)

Weights come from TenantSettings.search_weights; effective confidence and staleness are the ones of
`memory_admin.scoring` (the same numbers FactOut shows). Components, all in 0..1:

- vector: cosine similarity of query and fact embeddings (pgvector `<=>`, exact `cosine` reported too),
  rescaled min-max over the candidates. A query that holds a name is embedded with and without its
  names and compared by the mix (`search_vectors`, TOPIC_SHARE).
- keyword: BM25 weight of the query's lexemes (Postgres `english` text search: stemmed, stopwords
  removed) that a fact contains, IDF over the candidate facts, relative to the best match. Any lexeme
  may match (an OR query): an AND query misses every fact that lacks one word of a long question, and
  Postgres' ts_rank has no IDF, so a common word and a rare name would count alike.
- recency: exp(−days since the fact became true / RECENCY_DAYS).
- importance: the fact's importance.
- neighbour: the best relevance among other candidates observed within NEIGHBOUR_MINUTES, plus the mean
  of the best NEIGHBOUR_TOP of them, plus ADJACENT_SHARE × the best within ADJACENT_MINUTES (0..3): a
  fact in a stretch of memory where several facts match (a conversation about the task) is lifted more
  than one next to a single match, and the turn right before or after a match more still.
- entity: the entities the query names (an alias of an entity the user reads, matched exactly on the
  query's word n-grams; when none matches, the nearest entities by embedding above ENTITY_EMBEDDING_MIN):
  a fact that mentions them scores the IDF-weighted sum of those it mentions (MENTION_SHARE of an entity
  it names but is not about, i.e. not as its subject), relative to the best such fact;
  a fact that mentions only an entity one open relation away from them scores HOP_SHARE. A fact whose
  entities are not drawn yet (`entities_due`) is counted from its text as its drawing will link it
  (`undrawn_entities`), so the ranking does not depend on how far drawing has caught up.
- time: how well the fact's observed time matches the time the query names (`timematch`): 1 inside,
  decaying outside; 0 for every fact when the query names no time, so the factor is then exactly 1.
- length: (distinct lexemes / their mean over the candidates) ** LENGTH_PRIOR, a mild document-length
  prior: a longer statement says more, so it more often holds what a question asks about ("thanks!"
  rarely does); BM25's weak length normalisation alone does not favour it.
- specificity: (the mean IDF of the fact's SPECIFIC_TOP rarest lexemes / its mean over the candidates)
  ** SPECIFICITY_PRIOR, IDF over the candidates as for the keywords: a statement that names something
  particular (a place, a title, a hobby: words the user's other memories rarely use) is favoured over
  small talk made of the words every memory uses ("thanks, that's awesome"). It does not depend on the
  query: it ranks the specific statements of a topic above its chatter, so a question whose answer is
  spread over many statements ("which cities has Jon visited?") finds more of them.
- spread: the SPREAD_TOP best are re-ranked greedily, each pick's final scaled by
  1 − SPREAD_STEP × (the picks already made within NEIGHBOUR_MINUTES of it − SPREAD_FREE + 1) once there
  are SPREAD_FREE of them: the third and later statements of one conversation yield to near-equal ones
  from other conversations (the factor, 1 when nothing yielded, is reported; `final` includes it).

What it ranks is `retrieval.candidates.Candidate`; these are pure functions of the candidates and the
weights (no database), with their constants.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections import Counter

from memory_admin import scoring
from memory_admin.models import Fact
from memory_admin.models.tenancy import default_search_weights
from memory_admin.retrieval.candidates import NO_ENTITY, Candidate
from memory_admin.retrieval.decompose import NEGATION_HEAD, holds_negated
from memory_admin.retrieval.timematch import TIME_WEIGHT

RECENCY_DAYS = 30.0
# BM25 constants (the usual ones); tf is 1 per lexeme, so k1 only shapes the length normalisation.
BM25_K1 = 1.2
# Facts are short single statements of similar length: weak length normalisation (0.75 is the usual
# value for documents; on short statements it over-rewards the shortest ones).
BM25_B = 0.3
# Memories recorded together (one conversation, one extraction batch) share context: a fact observed
# within NEIGHBOUR_MINUTES of a strongly matching fact gets NEIGHBOUR_WEIGHT × that fact's relevance.
# It lifts the turn that answers a question when a neighbouring turn carries the question's words.
NEIGHBOUR_MINUTES = 30.0
NEIGHBOUR_WEIGHT = 0.25
NEIGHBOUR_TOP = 3
# The turns right before and after a match (observed within ADJACENT_MINUTES) get more: in a conversation
# the answer is often the reply to the turn that carries the question's words.
ADJACENT_MINUTES = 1.25
ADJACENT_SHARE = 1.0
# Exponent of the length prior (bench/README.md: 0.05 lifted LoCoMo R@10 0.714 -> 0.739; larger values
# lift R@10 more but cost the context block, where a longer fact also costs more tokens).
LENGTH_PRIOR = 0.05
STALE_WEIGHT = 0.5
# Specificity prior (module docstring): the mean IDF of a fact's SPECIFIC_TOP rarest lexemes relative to
# the candidates' mean, ** SPECIFICITY_PRIOR, a fact without lexemes counted SPECIFICITY_FLOOR of the mean.
# bench/README.md "Multi-hop recall, round 6": LoCoMo dev multi-hop R@10 0.525 -> 0.552, pooled 0.790 ->
# 0.791 (the rarest 2 / 3 / 5 lexemes and exponents 0.3-0.8 measured).
SPECIFIC_TOP = 3
SPECIFICITY_PRIOR = 0.4
SPECIFICITY_FLOOR = 0.25
# Spread of the best over conversations (module docstring). bench/README.md "Multi-hop recall, round 6":
# with the specificity prior, LoCoMo dev multi-hop R@10 0.548 -> 0.557 (single-hop 0.867 -> 0.862); windows
# of 0.5-3 h and heads of 20 or 30 gave the same; a step of 0.03 cost single-hop more, 3 free picks lifted less.
SPREAD_TOP = 20
SPREAD_FREE = 2
SPREAD_STEP = 0.02
# Entity-anchored search: the final score is multiplied by (1 + ENTITY_WEIGHT × entity); a fact that names
# an entity of the query without being about it (not its subject) counts MENTION_SHARE of it, a fact one
# relation away HOP_SHARE.
# (Tuned on the LoCoMo dev split, bench/README.md: a factor rather than a share of the relevance, so the
# lift does not spread to the neighbours through their support.)
ENTITY_WEIGHT = 0.6
HOP_SHARE = 0.4
MENTION_SHARE = 0.3
# A named entity that more than ENTITY_COMMON of the candidates mention tells them apart less: its lift
# falls linearly to nothing when every candidate mentions it (five facts about Jo: "what tea does Jo
# drink?" is decided by the tea, not by Jo). LoCoMo dev: 0.8 lost three questions whose speaker is named
# in most turns; from 0.95 on, the ranking is the same as without it.
ENTITY_COMMON = 0.95
# The weights of a tenant that stored none, and of any component its stored weights leave out: the
# field's own default (models.tenancy), the one home of the default weights.
DEFAULT_WEIGHTS = default_search_weights()


def weights_of(stored_json: str | None, stored: dict[str, float] | None = None) -> dict[str, float]:
    """The weights a search ranks by: the tenant's stored ones (as JSON text, as the candidate statement
    returns them, or as a dict) over DEFAULT_WEIGHTS."""
    return {**DEFAULT_WEIGHTS, **(json.loads(stored_json) if stored_json else stored or {})}


# A scored candidate: (final, candidate, score components).
Scored = tuple[float, Candidate, dict]


def _idf(n: int, df: int) -> float:
    """BM25's IDF of a lexeme found in `df` of `n` candidates (the keywords, the entities, specificity)."""
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def score(
    rows: list[Candidate],
    weights: dict[str, float],
    time: list[float] | None = None,
    *,
    negated: frozenset[str] = frozenset(),
) -> list[Scored]:
    """Fuse the components of every candidate; best first. `matched` is a bitmask over the query's
    lexemes (bit i: the fact contains lexeme i). `time`: each candidate's time component
    (`timematch.time_scores`), 0 for all when the query names no time. Among the best, a fact holding
    `negated` lexemes (the topic a question excludes) comes after the others (`negated_last`)."""
    if not rows:
        return []
    n = len(rows)
    masks = Counter(r.matched for r in rows)  # few distinct masks: the document frequencies from them
    df = [sum(count for mask, count in masks.items() if mask >> i & 1) for i in range(max(masks).bit_length())]
    idf = [_idf(n, c) for c in df]
    avg_len = sum(r.doc_len for r in rows) / n or 1.0
    bm25 = []
    idf_sums: dict[int, float] = {}  # many candidates match the same lexemes: sum their IDF once
    for row in rows:
        mask = row.matched
        if not mask:
            bm25.append(0.0)
            continue
        total = idf_sums.get(mask)
        if total is None:
            total = idf_sums[mask] = sum(w for i, w in enumerate(idf) if mask >> i & 1)
        norm = 1 - BM25_B + BM25_B * (row.doc_len / avg_len)
        per_term = (BM25_K1 + 1) / (1 + BM25_K1 * norm)
        bm25.append(total * per_term)
    best_keyword = max(bm25) or 1.0
    # Cosine similarity is rescaled over the candidates (min-max), as the keyword score is relative to
    # the best match: raw cosines of one embedding model crowd into a narrow band, which would make the
    # vector weight mean less than its nominal share.
    cosines = [max(0.0, 1.0 - r.distance) if r.distance is not None else 0.0 for r in rows]
    lo, hi = min(cosines), max(cosines)

    entity = _entity_scores(rows)
    specific = _specificity(rows)
    out = []
    w_vector, w_keyword, w_recency, w_importance = (
        weights.get(name, 0.0) for name in ("vector", "keyword", "recency", "importance")
    )
    stale_status, stale_threshold = Fact.Status.STALE, scoring.STALE_THRESHOLD
    times = time if time is not None else [0.0] * n
    for row, kw, cosine, ent, spec, when in zip(rows, bm25, cosines, entity, specific, times, strict=True):
        stale_score = float(row.stale_score)
        vector = (cosine - lo) / (hi - lo) if hi > lo else float(cosine > 0)
        keyword = kw / best_keyword
        recency = math.exp(-float(row.age_days) / RECENCY_DAYS)
        importance = float(row.importance)
        parts = {
            "vector": vector,
            "cosine": cosine,
            "keyword": keyword,
            "recency": recency,
            "importance": importance,
            "entity": ent,
            "specificity": spec,
            "time": when,
            "spread": 1.0,  # _spread sets the factor of each of the best it re-ranks
            "effective_confidence": float(row.eff_conf),
            "staleness": stale_score,
            # scoring.is_stale, on the SQL score.
            "stale": row.status == stale_status or stale_score > stale_threshold,
            # The weighted sum in the order (and from the 0) of a sum() over the four.
            "relevance": 0 + w_vector * vector + w_keyword * keyword + w_recency * recency + w_importance * importance,
        }
        out.append((row, parts))

    _support(out, n)
    scored = [(parts["final"], row, parts) for row, parts in out]
    # Ties by id: a UUID orders as its canonical text does (fixed-width lowercase hex), without the text.
    scored.sort(key=_rank_key)
    return negated_last(_spread(scored), negated)


def _rank_key(item: Scored) -> tuple:
    return (-item[0], -item[2]["vector"], item[1].id)


def _spread(scored: list[Scored]) -> list[Scored]:
    """The SPREAD_TOP best re-ranked greedily (module docstring), then everything in final order again."""
    head, tail = scored[:SPREAD_TOP], scored[SPREAD_TOP:]
    minutes = [float(row.age_days) * 1440.0 for _, row, _ in head]
    near = [[j for j, m in enumerate(minutes) if abs(m - here) <= NEIGHBOUR_MINUTES] for here in minutes]
    picked_near = [0] * len(head)  # picks so far within NEIGHBOUR_MINUTES of each
    left = list(range(len(head)))
    while left:
        best, best_final, best_factor = 0, -1.0, 1.0
        for pos, i in enumerate(left):
            same = picked_near[i]
            factor = 1.0 - SPREAD_STEP * (same - SPREAD_FREE + 1) if same >= SPREAD_FREE else 1.0
            if head[i][0] * factor > best_final:
                best, best_final, best_factor = pos, head[i][0] * factor, factor
        i = left.pop(best)
        for j in near[i]:
            picked_near[j] += 1
        parts = head[i][2]
        parts["spread"] = best_factor
        parts["final"] = best_final
    # Only the head's finals changed (none rose): the tail is in final order already, and follows the
    # re-sorted head unless a pick that yielded fell below the tail's best.
    head = sorted(((parts["final"], row, parts) for _, row, parts in head), key=_rank_key)
    if tail and _rank_key(head[-1]) > _rank_key(tail[0]):
        return sorted(head + tail, key=_rank_key)
    return head + tail


def negated_last(scored: list[Scored], negated: frozenset[str]) -> list[Scored]:
    """The NEGATION_HEAD best with the facts that hold the negated topic after the others (retrieval.decompose),
    their final lowered to the last other's, so that finals still read best first; the rest unchanged."""
    if not negated:
        return scored
    head = scored[:NEGATION_HEAD]
    others = [item for item in head if not holds_negated(item[1].lexemes, negated)]
    if not others or len(others) == len(head):
        return scored
    floor = others[-1][0]
    demoted = []
    for final, row, parts in head:
        if holds_negated(row.lexemes, negated):
            parts["final"] = min(final, floor)
            demoted.append((parts["final"], row, parts))
    return [*others, *demoted, *scored[NEGATION_HEAD:]]


def _entity_scores(rows: list[Candidate]) -> list[float]:
    """The entity component of each candidate (module docstring): IDF over the candidates of each named
    entity a fact mentions (MENTION_SHARE of it unless as the fact's subject), relative to the best;
    HOP_SHARE for a fact that mentions only a neighbour of them."""
    ents = [r.ent or NO_ENTITY for r in rows]
    width = max(mask for mask, _, _ in ents).bit_length()
    if not width and not any(hop for _, _, hop in ents):
        return [0.0] * len(rows)
    n = len(rows)
    df = [sum(1 for mask, _, _ in ents if mask >> i & 1) for i in range(width)]
    idf = [_idf(n, c) for c in df]
    # Relative to the best fact as if no entity were common, so that a common one lifts less (ENTITY_COMMON).
    # A lone candidate has nothing to be told apart from: its lift is as it was.
    common = [min(1.0, (n - c) / (n * (1.0 - ENTITY_COMMON))) if n > 1 else 1.0 for c in df]
    direct, plain = [], []
    for mask, subject, _ in ents:
        shares = [(w * (1.0 if subject >> i & 1 else MENTION_SHARE), i) for i, w in enumerate(idf) if mask >> i & 1]
        plain.append(sum(w for w, _ in shares))
        direct.append(sum(w * common[i] for w, i in shares))
    best = max(plain, default=0.0) or 1.0
    return [d / best if p else (HOP_SHARE if e[2] else 0.0) for e, d, p in zip(ents, direct, plain, strict=True)]


def _specificity(rows: list[Candidate]) -> list[float]:
    """The specificity prior of each candidate (module docstring): the mean IDF over the candidates of
    its SPECIFIC_TOP rarest lexemes, relative to the candidates' mean, ** SPECIFICITY_PRIOR."""
    n = len(rows)
    lexemes = [row.lexemes or () for row in rows]
    df = Counter(itertools.chain.from_iterable(lexemes))
    # The rarest lexemes are those of the lowest document frequency; IDF as the keywords' (score), for
    # the frequencies that occur.
    idf = {c: _idf(n, c) for c in set(df.values())}
    rarest = (sorted(map(df.__getitem__, own))[:SPECIFIC_TOP] for own in lexemes)
    means = [sum(map(idf.__getitem__, counts)) / SPECIFIC_TOP for counts in rarest]
    average = sum(means) / n
    if not average:
        return [1.0] * n
    return [max(SPECIFICITY_FLOOR, mean / average) ** SPECIFICITY_PRIOR for mean in means]


def _neighbour_support(near: list[float], adjacent: list[float], own: float) -> float:
    """The support of a candidate of relevance `own` from the others within NEIGHBOUR_MINUTES of it, given
    the relevances within NEIGHBOUR_MINUTES (`near`) and within ADJACENT_MINUTES (`adjacent`) of it, its
    own among them, each in ascending order: its own value is left out once (an equal value is the same
    number), so the best of the others are what sorting the others would give."""
    best = near[-NEIGHBOUR_TOP - 1 :][::-1]
    if own in best:
        best.remove(own)
    best = best[:NEIGHBOUR_TOP]
    support = best[0] + sum(best) / NEIGHBOUR_TOP if best else 0.0
    top = adjacent[-2:][::-1]
    if top and top[0] == own:
        top = top[1:]
    return support + ADJACENT_SHARE * (top[0] if top else 0.0)


def _support(out: list[tuple[Candidate, dict]], n: int) -> None:
    """Neighbour support and the length prior, then `final`. Support: the best relevance among the
    other candidates observed within NEIGHBOUR_MINUTES plus the mean of the best NEIGHBOUR_TOP of them,
    plus ADJACENT_SHARE × the best of those observed within ADJACENT_MINUTES. The two windows slide along
    the candidates in time order, each kept sorted: linear in the candidates however many share a window
    (sorting each candidate's window cost 0.5 s at 1,000 candidates written within the same half hour)."""
    avg_len = sum(row.doc_len for row, _ in out) / n or 1.0
    by_time = sorted(range(len(out)), key=lambda i: out[i][0].age_days)
    minutes = [float(out[i][0].age_days) * 1440.0 for i in by_time]
    relevance = [out[i][1]["relevance"] for i in by_time]
    near: list[float] = []  # relevance[lo:hi], sorted
    adjacent: list[float] = []  # relevance[a_lo:a_hi], sorted
    lo = hi = a_lo = a_hi = 0
    for pos, i in enumerate(by_time):
        lo_pos = bisect.bisect_left(minutes, minutes[pos] - NEIGHBOUR_MINUTES, 0, pos)
        hi_pos = bisect.bisect_right(minutes, minutes[pos] + NEIGHBOUR_MINUTES, pos)
        a_lo_pos = bisect.bisect_left(minutes, minutes[pos] - ADJACENT_MINUTES, lo_pos, pos)
        a_hi_pos = bisect.bisect_right(minutes, minutes[pos] + ADJACENT_MINUTES, pos, hi_pos)
        for j in range(hi, hi_pos):
            bisect.insort(near, relevance[j])
        for j in range(lo, lo_pos):
            del near[bisect.bisect_left(near, relevance[j])]
        for j in range(a_hi, a_hi_pos):
            bisect.insort(adjacent, relevance[j])
        for j in range(a_lo, a_lo_pos):
            del adjacent[bisect.bisect_left(adjacent, relevance[j])]
        lo, hi, a_lo, a_hi = lo_pos, max(hi, hi_pos), a_lo_pos, max(a_hi, a_hi_pos)
        support = _neighbour_support(near, adjacent, relevance[pos]) if hi_pos - lo_pos > 1 else 0.0
        row, parts = out[i]
        parts["neighbour"] = support
        parts["length"] = (max(1, row.doc_len) / avg_len) ** LENGTH_PRIOR
        supported = parts["relevance"] + NEIGHBOUR_WEIGHT * support
        parts["final"] = (
            supported
            * (1.0 + ENTITY_WEIGHT * parts["entity"])
            * (1.0 + TIME_WEIGHT * parts["time"])
            * parts["length"]
            * parts["specificity"]
            * parts["effective_confidence"]
            * (STALE_WEIGHT if parts["stale"] else 1.0)
        )
