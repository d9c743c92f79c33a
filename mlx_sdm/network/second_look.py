"""The second look: what K answers drawn from the same prompt say about the answer the chat gave.

A model that knows a fact repeats it when asked again at temperature 0.7 ("The capital of Japan is Tokyo."
six times); one that does not know it says something different each time. The features, each read off the
answer's first sentence (where a short answer states it) and those of the drawn answers:

- **lexical agreement**: the mean, over the K drawn answers, of the share of the answer's *new content
  words* (its words after the NQ-open normalisation, less function words and the question's own words) that
  the drawn answer repeats; 0 when the answer adds no content word to the question;
- **full agreement**: the share of drawn answers that repeat every one of those words;
- **embedding agreement**: the mean MiniLM cosine between the answer and each drawn answer;
- **spread**: the mean MiniLM cosine distance (1 − cosine) between pairs of drawn answers;
- **answer log-probability**: the mean token log-probability of the answer under the model;
- **drawn log-probability**: the mean, over the drawn answers, of their mean token log-probabilities.

:func:`agreement_features` turns them into the estimator's input vector (``FEATURE_NAMES`` order).

**The second-look member** (docs/verifiers.md, "The second look"): a verifier folder whose ``verifier.json`` holds
a ``"second_look"`` object, the :class:`SecondLookSpec` (how many answers are drawn, at which temperature, how
many tokens each, the seed, and the input scaling its estimator was fitted with). Its SDM estimator reads
:func:`second_look_inputs`: ``[agreement features; mean(h); h_delimiter]``, the six numbers above beside the
answer's hidden-state features, each dimension scaled by its own μ, σ fitted on D_tr (``input_scaling =
"per_dimension"``, so the six are not drowned by the 2·hidden states).

    spec = verifier.second_look_spec(OPEN_QUESTIONS)            # None: no second-look member
    drawn = spec.draw(lm, answer_cache, prompt_ids)               # K answers, one batch from the prompt cache
    look = spec.look(question, answer_text, answer_token_logprobs, drawn)
    verdict = verifier.judge_second_look(answer_features, look, minilm.encode, task=OPEN_QUESTIONS)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from mlx_sdm.calibration.adaptor import SCALING_PER_DIMENSION, SCALINGS
from mlx_sdm.errors import DataError
from mlx_sdm.lm.sampling import DEFAULT_SAMPLES, DEFAULT_SEED, DEFAULT_TEMPERATURE, SampledAnswers, sample_from_cache
from mlx_sdm.network.tasks.open_label import normalise_words

#: English function words and the verbs a short answer wraps its fact in ("The capital ... is Tokyo").
FUNCTION_WORDS = frozenset("""
a an the and or but if then than so of in on at by for to from with without into onto about as is are was were be
been being am do does did done have has had having it its it's this that these those there here which who whom whose
what when where why how i you he she we they me him her us them my your his our their not no yes can could will
would shall should may might must also just very more most some any all each every both either neither one s t
called known named approximately around located situated answer question
""".split())
#: Where a sentence ends: . ! ? followed by a space or the end (not a decimal point), or a line break.
_SENTENCE_END = re.compile(r"(?<!\d)[.!?](?=\s|$)|\n")

FEATURE_NAMES = ("lexical_agreement", "full_agreement", "embedding_agreement", "spread", "answer_logprob",
                 "drawn_logprob")

Embed = Callable[[list[str]], np.ndarray]  # unit-norm sentence embeddings, one row per text (MiniLM)


def first_sentence(text: str) -> str:
    """The text up to its first sentence end (module docstring); the whole text when it has none."""
    text = text.strip()
    m = _SENTENCE_END.search(text)
    return text[: m.start() + 1].strip() if m else text


def new_content_words(text: str, question: str) -> frozenset[str]:
    """The normalised words of ``text`` that are neither function words nor words of ``question``."""
    asked = set(normalise_words(question))
    return frozenset(w for w in normalise_words(text) if w not in FUNCTION_WORDS and w not in asked)


@dataclass(frozen=True)
class SecondLook:
    """The answer, the K drawn answers and the log-probabilities the features read."""

    question: str
    answer: str
    drawn: tuple[str, ...]
    answer_logprob: float  # mean token log-probability of the answer
    drawn_logprobs: tuple[float, ...]  # mean token log-probability of each drawn answer


def lexical_agreement(look: SecondLook) -> tuple[float, float]:
    """(lexical agreement, full agreement) of the answer's first sentence with the drawn answers' first
    sentences (module docstring)."""
    words = new_content_words(first_sentence(look.answer), look.question)
    if not words or not look.drawn:
        return 0.0, 0.0
    shares = [len(words & set(normalise_words(first_sentence(d)))) / len(words) for d in look.drawn]
    return float(np.mean(shares)), float(np.mean([s == 1.0 for s in shares]))


def embedding_agreement(look: SecondLook, embed: Embed) -> tuple[float, float]:
    """(mean cosine of the answer with each drawn answer, mean cosine distance between drawn answers)."""
    if not look.drawn:
        return 0.0, 0.0
    vectors = np.asarray(embed([first_sentence(look.answer)] + [first_sentence(d) for d in look.drawn]), np.float64)
    answer, drawn = vectors[0], vectors[1:]
    agreement = float(np.mean(drawn @ answer))  # unit vectors: the dot product is the cosine
    k = len(drawn)
    if k < 2:
        return agreement, 0.0
    gram = drawn @ drawn.T
    spread = float(np.mean(1.0 - gram[np.triu_indices(k, 1)]))  # mean over the k(k-1)/2 pairs
    return agreement, spread


def agreement_features(look: SecondLook, embed: Embed) -> np.ndarray:
    """The second look's feature vector, ``FEATURE_NAMES`` order, float32."""
    lexical, full = lexical_agreement(look)
    cosine, spread = embedding_agreement(look, embed)
    drawn = [v for v in look.drawn_logprobs if np.isfinite(v)]
    return np.array([lexical, full, cosine, spread, look.answer_logprob, float(np.mean(drawn)) if drawn else 0.0],
                    dtype=np.float32)


def agreement_matrix(looks: Sequence[SecondLook], embed: Embed) -> np.ndarray:
    """[N, len(FEATURE_NAMES)] for many answers, embedding every first sentence in one call."""
    texts: list[str] = []
    for look in looks:
        texts += [first_sentence(look.answer)] + [first_sentence(d) for d in look.drawn]
    table = np.asarray(embed(texts), np.float32) if texts else np.zeros((0, 1), np.float32)
    rows, at = [], 0
    for look in looks:
        n = 1 + len(look.drawn)
        block = table[at:at + n]
        at += n
        rows.append(agreement_features(look, lambda _texts, block=block: block))
    return np.stack(rows) if rows else np.zeros((0, len(FEATURE_NAMES)), np.float32)


# ------------------------------------------------------------------------------ the second-look member
#: The ``verifier.json`` key of a second-look member's spec.
SECOND_LOOK_KEY = "second_look"
#: What a second-look member's estimator reads (verifier.json "feature" "layout").
SECOND_LOOK_LAYOUT = "[agreement features (second_look.features); mean(h_0..h_k); h_k], h = final RMSNorm output"
#: Answers drawn per look and their temperature: the sampler's defaults (``lm/sampling.py``).
DEFAULT_K = DEFAULT_SAMPLES
DEFAULT_LOOK_TEMPERATURE = DEFAULT_TEMPERATURE
#: Tokens per drawn answer: the first sentence, which the agreement features read, fits in them; the answer's
#: own log-probability (``answer_logprob``) is read over as many of its first tokens, so both compare alike.
DEFAULT_DRAWN_TOKENS = 32
DEFAULT_LOOK_SEED = DEFAULT_SEED


def _whole(raw: Mapping[str, Any], key: str, default: int, path: str, least: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise DataError(f"must be a whole number ≥ {least}, got {value!r}; rebuild the member with "
                        "`mlx-sdm build-verifier --tasks open_questions --second-look K`", path=path,
                        field=f"{SECOND_LOOK_KEY}.{key}")
    return value


def _checked(raw: Any, path: str) -> dict[str, Any]:
    """The fields of a :class:`SecondLookSpec` read from ``raw``, each checked (:meth:`SecondLookSpec.from_dict`)."""
    if not isinstance(raw, Mapping):
        raise DataError("must be an object {k, temperature, max_tokens, seed, input_scaling, features}",
                        path=path, field=SECOND_LOOK_KEY)
    known = ("k", "temperature", "max_tokens", "seed", "input_scaling", "features")
    for key in raw:
        if key not in known:
            raise DataError(f"unknown key (known: {', '.join(known)})", path=path, field=f"{SECOND_LOOK_KEY}.{key}")
    temperature = raw.get("temperature", DEFAULT_LOOK_TEMPERATURE)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 < temperature < 100:
        raise DataError(f"must be a number above 0 (and below 100), got {temperature!r}", path=path,
                        field=f"{SECOND_LOOK_KEY}.temperature")
    scaling = raw.get("input_scaling", SCALING_PER_DIMENSION)
    if scaling not in SCALINGS:
        raise DataError(f"must be one of {', '.join(SCALINGS)}, got {scaling!r}", path=path,
                        field=f"{SECOND_LOOK_KEY}.input_scaling")
    features = raw.get("features", list(FEATURE_NAMES))
    if not isinstance(features, (list, tuple)) or tuple(features) != FEATURE_NAMES:
        raise DataError(f"this mlx-sdm computes the features {list(FEATURE_NAMES)}, the member was built on "
                        f"{features!r}; rebuild it with `mlx-sdm build-verifier --tasks open_questions "
                        "--second-look K`", path=path, field=f"{SECOND_LOOK_KEY}.features")
    return {"k": _whole(raw, "k", DEFAULT_K, path, 1), "temperature": float(temperature),
            "max_tokens": _whole(raw, "max_tokens", DEFAULT_DRAWN_TOKENS, path, 1),
            "seed": _whole(raw, "seed", DEFAULT_LOOK_SEED, path, 0), "input_scaling": scaling,
            "features": FEATURE_NAMES}


@dataclass(frozen=True)
class SecondLookSpec:
    """How a second-look member draws the answers it reads and how its input is scaled (module docstring)."""

    k: int = DEFAULT_K
    temperature: float = DEFAULT_LOOK_TEMPERATURE
    max_tokens: int = DEFAULT_DRAWN_TOKENS
    seed: int = DEFAULT_LOOK_SEED
    #: the estimator's input scaling (``FitConfig.input_scaling``): μ, σ per dimension, fitted on D_tr
    input_scaling: str = SCALING_PER_DIMENSION
    features: tuple[str, ...] = FEATURE_NAMES

    def __post_init__(self) -> None:
        _checked(self.to_dict(), "SecondLookSpec")  # a spec made in code meets the same checks as a file's

    def input_dim(self, state_dim: int) -> int:
        """The estimator's input width: the agreement features beside ``state_dim`` state features."""
        return len(self.features) + int(state_dim)

    def to_dict(self) -> dict[str, Any]:
        return {"k": self.k, "temperature": self.temperature, "max_tokens": self.max_tokens, "seed": self.seed,
                "input_scaling": self.input_scaling, "features": list(self.features)}

    @classmethod
    def from_dict(cls, raw: Any, path: str) -> "SecondLookSpec":
        """The spec in ``raw`` (verifier.json's ``"second_look"``); a DataError naming ``path`` and the field for
        an unknown key, a wrong type or value, or features this mlx-sdm does not compute."""
        return cls(**_checked(raw, path))

    def sampling(self) -> dict[str, Any]:
        """The drawing settings, as ``sample_from_cache`` and ``sample_for_prompts`` take them."""
        return {"k": self.k, "temperature": self.temperature, "seed": self.seed, "max_tokens": self.max_tokens}

    def draw(self, lm, cache: Sequence, prompt_ids: Sequence[int]) -> SampledAnswers:
        """The K answers of a second look, drawn in one batch from the answer's prompt cache (``cache``: its
        batch-1 mlx-lm KV cache holding the ``prompt_ids`` it was asked with; left as it was)."""
        return sample_from_cache(lm, cache, prompt_ids, **self.sampling())

    def look(self, question: str, answer: str, answer_logprobs: Sequence[float], drawn: SampledAnswers) -> SecondLook:
        """The :class:`SecondLook` of an answer: its text, the mean log-probability of its first ``max_tokens``
        tokens (``answer_logprobs``: per token, under the untempered model) and the drawn answers."""
        head = [float(v) for v in list(answer_logprobs)[: self.max_tokens]]
        return SecondLook(question, answer, tuple(drawn.texts), float(np.mean(head)) if head else 0.0,
                          tuple(drawn.mean_logprobs))


def second_look_inputs(looks: Sequence[SecondLook], states: np.ndarray, embed: Embed) -> np.ndarray:
    """[N, len(FEATURE_NAMES) + 2·hidden] float32: each answer's agreement features beside its state features
    ``[mean(h); h_delimiter]`` (``states``: [N, 2·hidden]), the member's estimator input (module docstring)."""
    states = np.asarray(states, np.float32).reshape(len(looks), -1)
    return np.concatenate([agreement_matrix(looks, embed), states], axis=1).astype(np.float32)
