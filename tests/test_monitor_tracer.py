"""TRACER (docs/monitoring.md, TRACER): the worked example, surprisal filter, repetition, gaps, properties."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlx_sdm.monitor.online.tracer import (
    MonitorWarning,
    TracerConfig,
    TracerMonitor,
    content_surprisal,
    prefix_scores,
    saup_rms,
    score_session,
    step_risk,
    tool_signature,
    tracer_jaccard,
    tracer_score,
)
from mlx_sdm.monitor.session_file.records import Session, SessionStep, ToolCall

# docs/monitoring.md, TRACER worked example: (actor, U, Da, DoA, DoU)
EXAMPLE = [
    ("agent", 0.40, 0.00, 0, 0),
    ("user", 0.90, 0, 0, 0.35),
    ("agent", 0.30, 0.10, 0.45, 0),
    ("agent", 0.55, 0.62, 0, 0),
    ("user", 1.10, 0, 0, 0.20),
    ("agent", 0.05, 1.00, 0.50, 0),
    ("user", 0.70, 0, 0, 0.15),
    ("agent", 0.35, 0.20, 0, 0),
]


def test_worked_example_3_12():
    cfg = TracerConfig()
    assert (cfg.alpha, cfg.beta, cfg.gamma, cfg.k, cfg.w) == (4.0, 4.0, 5.0, 0.26, 0.2)
    r = [step_risk(U, Da, DoA, DoU, cfg) for _, U, Da, DoA, DoU in EXAMPLE]
    np.testing.assert_allclose(r, [0.40, 1.75, 1.80, 2.48, 1.10, 4.00, 0.75, 0.80])
    assert tracer_score(r, cfg.k, cfg.w) == pytest.approx(3.392)
    np.testing.assert_allclose(prefix_scores(r, cfg.k, cfg.w), [0.40, 1.75, 1.80, 2.48, 2.48, 4.00, 4.00, 3.392])
    ref = TracerConfig.reference_code_dataclass_defaults()
    r_ref = [step_risk(U, Da, DoA, DoU, ref) for _, U, Da, DoA, DoU in EXAMPLE]
    np.testing.assert_allclose(r_ref, [0.40, 0.90, 0.45, 0.62, 1.10, 1.00, 0.70, 0.35])
    assert tracer_score(r_ref, ref.k, ref.w) == pytest.approx(1.10)
    cols = list(zip(*EXAMPLE))[1:]
    assert saup_rms(*cols, cfg) == pytest.approx(1.488735, abs=1e-6)
    assert tracer_score([], 0.26, 0.2) == 0.0


def test_surprisal_filter():
    tokens = ["I", " booked", " flight", " 1234", " the", " Paris"]
    logprobs = [-0.01, -1.20, -0.80, -2.0, -0.50, -0.03]
    assert content_surprisal(tokens, logprobs) == pytest.approx(1.0)
    assert content_surprisal([" the", ".", " 12.5"], [-3.0, -3.0, -3.0]) == 1e-4
    assert content_surprisal([" word"], [-0.05]) == pytest.approx(0.05)  # boundary: content
    assert content_surprisal([" word"], [-0.0499]) == 1e-4  # not content
    assert content_surprisal([" word", "ing"], [None, -2.0]) == pytest.approx(2.0)  # missing log-prob skipped


def test_jaccard_and_tool_signature():
    assert tracer_jaccard("Flight A123 is cancelled", "Flight B456 is cancelled") == pytest.approx(0.5)
    assert tracer_jaccard("the a", "flight") == 0.0
    a = ToolCall("book", {"b": 2, "a": 1})
    b = ToolCall("book", '{"a": 1, "b": 2}')
    assert tool_signature(a) == tool_signature(b)
    assert tool_signature(a) != tool_signature(ToolCall("book", {"a": 1, "b": 3}))


class BagEmbedder:
    """Deterministic test embedder: bag of lower-case words over a fixed vocabulary."""

    name = "bag-of-words"
    VOCAB = ["flight", "paris", "book", "cancel", "weather", "sunny", "refund", "observation", "tool"]

    def encode(self, texts):
        out = np.zeros((len(texts), len(self.VOCAB) + 1), dtype=np.float32)
        for i, t in enumerate(texts):
            words = t.lower().replace("(", " ").replace(":", " ").split()
            for w in words:
                out[i, self.VOCAB.index(w) if w in self.VOCAB else -1] += 1
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _step(i, actor, text, **kw):
    return SessionStep(step_id=f"{'user' if actor == 'user' else 'llm'}_{i}", actor=actor,
                       step_type=None if actor == "user" else kw.pop("step_type", "llm_call"), text=text, **kw)


def test_online_features_duplicate_tool_call_and_gaps():
    call = ToolCall("search_flights", {"to": "Paris"})
    steps = [
        _step(0, "user", "book flight paris"),
        _step(1, "agent", "book flight paris", token_logprobs=[-1.0], tokens=[" book"]),
        _step(2, "user", "weather sunny", token_logprobs=None),
        _step(3, "agent", "", step_type="tool_call", tool_calls=[call], observations=["refund"], token_logprobs=[], tokens=[]),
        _step(4, "agent", "", step_type="tool_call", tool_calls=[ToolCall("search_flights", '{"to": "Paris"}')],
              observations=[""], token_logprobs=[], tokens=[]),
        _step(5, "agent", "book flight paris", token_logprobs=[], tokens=[]),
    ]
    monitor = TracerMonitor(TracerConfig(), BagEmbedder(), session_id="s")
    outs = [monitor.observe(s) for s in steps]
    assert outs[1].U == pytest.approx(1.0) and outs[1].Da == 0.0
    assert outs[2].DoU == pytest.approx(1.0)  # orthogonal bags: delta = 1 - 0
    assert outs[3].Da == 0.0 and outs[3].DoA > 0
    assert outs[4].Da == 1.0  # exact duplicate call (arguments as a JSON string)
    assert outs[5].Da == pytest.approx(1.0)  # same meaning and same words as step 1
    assert outs[4].r == pytest.approx(4.0)
    assert all(o.embedder == "bag-of-words" for o in outs)
    assert [o.prefix_risk for o in outs] == pytest.approx(monitor.result().prefix)
    assert outs[2].surprisal_source == "missing" and outs[1].surprisal_source == "logprobs"


def test_text_window_is_last_three_agent_messages():
    texts = ["alpha beta", "gamma delta", "epsilon zeta", "eta theta", "alpha beta"]
    steps = [_step(i, "agent", t, token_logprobs=[], tokens=[]) for i, t in enumerate(texts)]
    monitor = TracerMonitor(embedder=None)
    outs = [monitor.observe(s) for s in steps]
    assert outs[-1].Da == 0.0  # "alpha beta" is 4 agent messages back, outside the window of 3
    assert outs[-1].embedder is None


def test_missing_logprobs_warns_and_falls_back():
    session = Session("s", steps=[_step(0, "agent", "hello there"), _step(1, "agent", "hello there")])
    with pytest.warns(MonitorWarning, match="no token log-probs"):
        result = score_session(session)
    assert result.missing_logprobs == 2 and not result.surprisal_available
    assert [o.U for o in result.steps] == [0.0, 0.0]
    assert result.steps[1].Da == pytest.approx(1.0)  # Jaccard-only fallback still sees the loop
    assert result.score == pytest.approx(4.0)


def test_minilm_embedder_is_recorded():
    from mlx_sdm.monitor.online.embedders import make_embedder

    emb = make_embedder("minilm")
    steps = [
        _step(0, "agent", "Your flight to Paris is booked.", token_logprobs=[], tokens=[]),
        _step(1, "user", "Thanks, that is great."),
        _step(2, "agent", "Your flight to Paris is booked!", token_logprobs=[], tokens=[]),
    ]
    result = score_session(Session("s", steps=steps), embedder=emb)
    assert result.embedder == emb.name and emb.name.startswith("minilm:")
    assert 0.0 < result.steps[1].DoU < 1.0
    assert result.steps[2].Da > 0.9


risks = st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(r=risks, bump=st.floats(0, 3), idx=st.integers(0, 11), k=st.floats(0.05, 1.2), w=st.floats(0, 1),
       noise=st.lists(st.floats(-1, 1), min_size=12, max_size=12), c=st.floats(0.1, 5),
       mask=st.lists(st.booleans(), min_size=12, max_size=12))
def test_aggregation_properties(r, bump, idx, k, w, noise, c, mask):
    r = np.array(r)
    rho = tracer_score(r, k, w)
    bumped = r.copy()
    bumped[idx % r.size] += bump
    assert tracer_score(bumped, k, w) >= rho - 1e-12  # monotone
    s = np.clip(r + np.array(noise[: r.size]), 0, None)
    assert abs(tracer_score(s, k, w) - rho) <= np.max(np.abs(s - r)) + 1e-9  # 1-Lipschitz in l-inf
    assert tracer_score(c * r, k, w) == pytest.approx(c * rho, rel=1e-9, abs=1e-12)  # positive homogeneity
    m = np.array(mask[: r.size])
    agent, user = np.where(m, r, 0.0), np.where(m, 0.0, r)
    assert rho <= tracer_score(agent, k, w) + tracer_score(user, k, w) + 1e-9  # subadditive across actors
