"""AUQ (docs/monitoring.md, AUQ): the worked example, propagation, levels, escalation, spans, resume."""

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mlx_sdm.monitor.online.auq_escalation import (
    REFLECTION_KIND,
    EscalationAction,
    MonitorStateError,
    SessionStatus,
    UncertaintyError,
    UncertaintyLevel,
    UncertaintyPolicy,
    decide_action,
    is_irreversible,
    level_for,
)
from mlx_sdm.monitor.online.auq import AUQMonitor
from mlx_sdm.monitor.online.auq_config import EstimatorConfig
from mlx_sdm.monitor.online.auq_confidence import (
    adaptive_semantic_entropy,
    auq_jaccard,
    cluster_samples,
    entropy_confidence,
    parse_verbalized_confidence,
)
from mlx_sdm.monitor.online.auq_propagation import propagate_ema


class ScriptedSampler:
    """Returns pre-written samples in order and counts the calls."""

    def __init__(self, samples):
        self.samples, self.drawn = list(samples), 0

    def sample(self, n):
        out = self.samples[self.drawn : self.drawn + n]
        self.drawn += n
        return out


def clusters_311_samples():
    """Five samples: first pair Jaccard 0.35 (no early stop); clusters {3, 1, 1} at >= 0.40."""
    shared = [f"s{i}" for i in range(7)]
    a = " ".join(shared + [f"l{i}" for i in range(7)])
    b = " ".join(shared + [f"r{i}" for i in range(6)])
    c = " ".join(shared + ["l0", "l1", "l2", "r0", "r1", "r2"])  # links a (10/17) and b (10/16)
    assert auq_jaccard(a, b) == pytest.approx(0.35)
    return [a, b, c, "zebra yak", "quokka"]


def test_semantic_entropy_values():
    assert entropy_confidence([3, 1, 1]) == pytest.approx(0.409564, abs=1e-6)
    assert entropy_confidence([2]) == 1.0
    assert entropy_confidence([1, 1, 1, 1, 1]) == pytest.approx(0.0)
    assert cluster_samples(["x y", "x y z", "q"], 0.40) == [2, 1]
    # transitive (connected components): a~b, b~c, a!~c -> one cluster
    assert cluster_samples(["a b c", "b c d", "c d e"], 0.40) == [3]
    assert auq_jaccard("", "") == 1.0 and auq_jaccard("", "x") == 0.0
    assert auq_jaccard("Paris, France!", "paris france") == 1.0


def test_adaptive_sampling_early_stop_and_full():
    cfg = EstimatorConfig()
    early = ScriptedSampler(["the flight is booked", "the flight is booked now"])
    res = adaptive_semantic_entropy(early, cfg)
    assert res.early_stopped and res.samples_used == 2 and res.confidence == 1.0 and early.drawn == 2
    samples = clusters_311_samples()
    res = adaptive_semantic_entropy(ScriptedSampler(samples), cfg)
    assert not res.early_stopped and res.samples_used == 5
    assert res.cluster_sizes == [3, 1, 1] and res.confidence == pytest.approx(0.409564, abs=1e-6)

    class Broken:
        def sample(self, n):
            raise RuntimeError("model crashed")

    res = adaptive_semantic_entropy(Broken(), cfg)
    assert res.samples_used == 0 and res.confidence is None and "model crashed" in res.error


def _monitor(**policy):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    policy.setdefault("enable_semantic_sampling", True)
    return AUQMonitor(UncertaintyPolicy(**policy), EstimatorConfig(), tracer_provider=provider), exporter


def _worked_example(monitor, tool_names=()):
    state = monitor.start("s")
    state.cumulative_confidence = 0.85  # previous P
    return monitor.score_step("s", "llm_call", '{"answer": "x", "confidence": 0.95}', p_true=0.80,
                              sampler=ScriptedSampler(clusters_311_samples()), tool_names=tool_names)


def test_worked_example_2_10():
    monitor, exporter = _monitor()
    step = _worked_example(monitor)
    assert step.verbalized_confidence == 0.95 and step.p_true_confidence == 0.80 and step.p_true_ran
    assert step.fused_confidence == pytest.approx(0.70)
    assert step.entropy_confidence == pytest.approx(0.409564, abs=1e-6)
    assert step.step_confidence == pytest.approx(0.409564, abs=1e-6)
    assert step.propagated_confidence == pytest.approx(0.607760, abs=1e-6)
    assert step.level is UncertaintyLevel.MEDIUM and step.action is EscalationAction.PROCEED_WITH_LOG
    assert step.samples_used == 5 and not step.early_stopped and not step.irreversible
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["uncertainty.semantic", "uncertainty.estimate"]
    est = exporter.get_finished_spans()[1].attributes
    assert est["level"] == "medium" and est["samples_used"] == 5 and est["propagated_confidence"] == pytest.approx(0.60776, abs=1e-5)
    assert "entropy_confidence" not in est
    sem = exporter.get_finished_spans()[0].attributes
    assert sem["sample_count"] == 5 and sem["early_stopped"] is False


def test_worked_example_irreversible_pause_and_span():
    monitor, exporter = _monitor(irreversible_tool_names=["send_email"])
    step = _worked_example(monitor, tool_names=["send_email_to_client"])
    assert step.irreversible and step.action is EscalationAction.PAUSE_FOR_HUMAN
    assert monitor.belief("s").status is SessionStatus.WAITING_FOR_HUMAN
    assert monitor.belief("s").transcript == []  # no reflection for an override pause
    esc = [s for s in exporter.get_finished_spans() if s.name == "uncertainty.escalate"]
    assert len(esc) == 1 and esc[0].attributes["irreversible"] is True and esc[0].attributes["level"] == "medium"


def test_propagation_sequence():
    cfg = EstimatorConfig()
    P, out = None, []
    for s in (0.20, 0.90, 0.95):
        P = propagate_ema(P, s, "llm_call", cfg)
        out.append(P)
    assert out == pytest.approx([0.200, 0.585, 0.78575])
    assert level_for(out[-1], UncertaintyPolicy()) is UncertaintyLevel.MEDIUM
    assert propagate_ema(0.5, 1.0, "decision", cfg) == pytest.approx(0.85)
    assert propagate_ema(0.5, 1.0, "memory", cfg) == pytest.approx(0.675)  # alias
    assert propagate_ema(0.5, 1.0, "planning", cfg) == pytest.approx(0.775)  # unknown -> 0.55


@pytest.mark.parametrize(
    "P, level",
    [(0.80, "low"), (0.7999, "medium"), (0.60, "medium"), (0.5999, "high"), (0.40, "high"), (0.3999, "critical"), (1.0, "low"), (0.0, "critical")],
)
def test_level_boundaries(P, level):
    assert level_for(P, UncertaintyPolicy()).value == level


def test_irreversible_rules():
    policy = UncertaintyPolicy(irreversible_tool_names=["", "Delete"])
    assert not is_irreversible(["search"], policy)  # an empty entry never matches
    assert is_irreversible(["db_delete_row"], policy)  # case-insensitive substring
    assert decide_action(UncertaintyLevel.LOW, True) is EscalationAction.PROCEED
    assert decide_action(UncertaintyLevel.MEDIUM, True) is EscalationAction.PAUSE_FOR_HUMAN
    assert decide_action(UncertaintyLevel.HIGH, True) is EscalationAction.PAUSE_FOR_HUMAN
    assert decide_action(UncertaintyLevel.CRITICAL, True) is EscalationAction.ABORT
    with pytest.raises(ValueError, match="1 >= low > medium > high >= 0"):
        UncertaintyPolicy(low_threshold=0.5, medium_threshold=0.6)


def test_verbalized_parsing():
    assert parse_verbalized_confidence('{"confidence": 0.7}') == 0.7
    assert parse_verbalized_confidence("<confidence>85</confidence>") == 0.85
    assert parse_verbalized_confidence('{"confidence": 0.2} then <confidence>0.9</confidence>') == 0.9  # last wins
    assert parse_verbalized_confidence("<confidence>0.3</confidence> {\"confidence\": \"60%\"}") == 0.6
    assert parse_verbalized_confidence("<confidence>-2</confidence>") == 0.0
    assert parse_verbalized_confidence("<confidence>250</confidence>") is None
    assert parse_verbalized_confidence("I am fairly sure") is None
    assert parse_verbalized_confidence("<confidence>high</confidence>") is None


def test_fusion_ceilings_and_missing_default():
    monitor = AUQMonitor()
    only_v = monitor.score_step("a", "llm_call", "<confidence>1.0</confidence>")
    assert only_v.fused_confidence == pytest.approx(0.75) and only_v.level is UncertaintyLevel.MEDIUM
    both = monitor.score_step("b", "llm_call", "<confidence>1.0</confidence>", p_true=1.0)
    assert both.fused_confidence == pytest.approx(0.84)
    none = AUQMonitor().score_step("c", "llm_call", "no signal")
    assert none.fused_confidence == 0.5 and none.level is UncertaintyLevel.HIGH
    off = AUQMonitor(UncertaintyPolicy(enable_p_true=False))
    calls = []
    skipped = off.score_step("d", "llm_call", "<confidence>1.0</confidence>", p_true=lambda: calls.append(1) or 0.9)
    assert not skipped.p_true_ran and calls == [] and skipped.p_true_confidence is None


def test_pause_reflection_resume_round_trip():
    monitor, exporter = _monitor(enable_semantic_sampling=False)
    transcript = [{"role": "user", "content": "Plan my trip"}]
    monitor.start("s", transcript)
    step = monitor.score_step("s", "llm_call", "<confidence>0.9</confidence>", p_true=0.5)  # f = 0.4*0.65+0.6*0.4 = 0.5
    assert step.level is UncertaintyLevel.HIGH and step.action is EscalationAction.PAUSE_FOR_HUMAN
    reflection = transcript[-1]
    assert reflection["role"] == "system" and reflection["metadata"]["kind"] == REFLECTION_KIND
    assert "NOT confident" in reflection["content"] and "what information would resolve it" in reflection["content"]
    with pytest.raises(MonitorStateError, match="resume"):
        monitor.score_step("s", "llm_call", "more")
    monitor.resume("s", "Use the cheaper hotel.")
    assert transcript[-1] == {"role": "user", "content": "Use the cheaper hotel.", "metadata": {"kind": "human_guidance"}}
    assert transcript.index(reflection) == len(transcript) - 2  # guidance comes after the reflection
    with pytest.raises(MonitorStateError):
        monitor.resume("s", "again")
    nxt = monitor.score_step("s", "llm_call", "<confidence>1.0</confidence>", p_true=1.0)
    assert nxt.propagated_confidence == pytest.approx(0.55 * 0.84 + 0.45 * 0.5)  # no reset on resume
    meta = monitor.run_metadata("s")["uncertainty"]
    assert meta == {"overall_level": "medium", "cumulative_confidence": pytest.approx(0.687),
                    "total_steps": 2, "high_uncertainty_steps": 1, "last_step_id": "llm_1"}
    esc = [s for s in exporter.get_finished_spans() if s.name == "uncertainty.escalate"]
    assert len(esc) == 1 and esc[0].attributes["irreversible"] is False


def test_reset_on_resume_and_tool_step_has_no_reflection():
    monitor = AUQMonitor(UncertaintyPolicy(reset_on_resume=True))
    monitor.start("s")
    step = monitor.score_step("s", "tool_call", "<confidence>0.9</confidence>", p_true=0.5)
    assert step.action is EscalationAction.PAUSE_FOR_HUMAN and monitor.belief("s").transcript == []
    monitor.resume("s", "ok")
    assert monitor.score_step("s", "llm_call", "", p_true=1.0).propagated_confidence == pytest.approx(0.9)


def test_abort_on_critical():
    monitor, exporter = _monitor(enable_semantic_sampling=False)
    with pytest.raises(UncertaintyError) as info:
        monitor.score_step("s", "decision", "<confidence>0.1</confidence>", p_true=0.1)
    err = info.value
    assert err.level is UncertaintyLevel.CRITICAL and err.step_id == "decision_0" and err.cumulative_confidence == 0.0
    assert monitor.belief("s").status is SessionStatus.ABORTED
    assert monitor.belief("s").transcript == []  # no reflection on CRITICAL
    assert monitor.run_metadata("s")["uncertainty"]["overall_level"] == "critical"
    assert [s.name for s in exporter.get_finished_spans()] == ["uncertainty.estimate", "uncertainty.escalate"]
    with pytest.raises(MonitorStateError, match="aborted"):
        monitor.score_step("s", "llm_call", "")


def test_spans_are_noops_without_provider():
    step = AUQMonitor().score_step("s", "llm_call", "<confidence>0.99</confidence>", p_true=0.99)
    assert step.fused_confidence == pytest.approx(0.4 * 0.74 + 0.6 * 0.89)
    assert step.level is UncertaintyLevel.LOW and step.action is EscalationAction.PROCEED


def test_estimator_flag_also_disables_p_true():
    monitor = AUQMonitor(estimator=EstimatorConfig(enable_p_true=False))
    assert not monitor.score_step("s", "llm_call", "", p_true=0.9).p_true_ran


def test_verifier_probability_is_pessimistic_min():
    step = AUQMonitor().score_step("s", "llm_call", "", p_true=1.0, verifier_p=0.45)
    assert step.fused_confidence == pytest.approx(0.9) and step.step_confidence == 0.45
    record = step.to_format()
    assert record.level == "high" and record.action == "pause_for_human" and record.propagated_confidence == 0.45


def uncertainty_guard_node(monitor: AUQMonitor, step_type: str, escalate_node: str):
    """How an agent graph uses the monitor (docs/monitoring.md, AUQ): a node that scores the state's last assistant message as a ``step_type`` step.

    ``state`` is a dict with ``session_id``, ``messages`` (role/content dicts) and ``metadata``; optional
    ``p_true``, ``sampler``, ``tool_names``. On PAUSE_FOR_HUMAN sets ``metadata["uncertainty_escalate"]``
    and ``metadata["next_node"] = escalate_node``; on ABORT the UncertaintyError propagates.
    """

    def node(state: dict) -> dict:
        messages = state.get("messages", [])
        text = next((m.get("content", "") for m in reversed(messages) if m.get("role") == "assistant"), "")
        metadata = state.setdefault("metadata", {})
        step = monitor.score_step(state["session_id"], step_type, text, p_true=state.get("p_true"),
                                  sampler=state.get("sampler"), tool_names=state.get("tool_names", ()))
        metadata.update(monitor.run_metadata(state["session_id"]))
        metadata["uncertainty_escalate"] = step.action is EscalationAction.PAUSE_FOR_HUMAN
        if metadata["uncertainty_escalate"]:
            metadata["next_node"] = escalate_node
        return state

    return node


def test_guard_node_routes_pause_to_escalate_node():
    monitor = AUQMonitor()
    node = uncertainty_guard_node(monitor, "decision", "human_review")
    state = {"session_id": "g", "messages": [{"role": "assistant", "content": "<confidence>0.9</confidence>"}], "p_true": 0.5}
    out = node(state)
    assert out["metadata"]["uncertainty_escalate"] is True and out["metadata"]["next_node"] == "human_review"
    assert out["metadata"]["uncertainty"]["overall_level"] == "high"
    ok = uncertainty_guard_node(monitor, "llm_call", "human_review")({"session_id": "h", "messages": [], "p_true": 1.0})
    assert ok["metadata"]["uncertainty_escalate"] is False and "next_node" not in ok["metadata"]


def test_otlp_extra_missing_gives_install_command(monkeypatch):
    import builtins

    from mlx_sdm.errors import MissingDependencyError
    from mlx_sdm.monitor.online.spans import configure_otlp

    real_import = builtins.__import__

    def no_exporter(name, *args, **kw):
        if name.startswith("opentelemetry.exporter"):
            raise ImportError(name)
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_exporter)
    with pytest.raises(MissingDependencyError, match=r"pip install 'mlx-sdm\[otlp\]'"):
        configure_otlp()


def test_resolved_alternatives_are_config_fields():
    assert cluster_samples(["a b c", "b c d", "c d e"], 0.40, "greedy") == [2, 1]  # vs [3] for components
    assert entropy_confidence([3, 1, 1], "log_k") == pytest.approx(1 - 0.950271 / __import__("math").log(3), abs=1e-6)
    assert propagate_ema(None, 0.2, "llm_call", EstimatorConfig(initial_confidence=1.0)) == pytest.approx(0.56)
    with pytest.raises(ValueError, match="cluster_method"):
        EstimatorConfig(cluster_method="kmeans")
    # f = 0.5 exactly: inside the inclusive zone, outside the exclusive one
    for inclusive, ran in ((True, True), (False, False)):
        monitor = AUQMonitor(UncertaintyPolicy(enable_semantic_sampling=True),
                             EstimatorConfig(trigger_inclusive=inclusive, calibration_mode="none", missing_confidence_default=0.5))
        sampler = ScriptedSampler(["same words", "same words"])
        step = monitor.score_step("s", "llm_call", "", sampler=sampler)
        assert (step.samples_used > 0) is ran
    with pytest.raises(ValueError, match="verifier_p"):
        AUQMonitor().score_step("v", "llm_call", "", verifier_p=1.5)
