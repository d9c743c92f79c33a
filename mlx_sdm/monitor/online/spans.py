"""OpenTelemetry spans of the AUQ monitor (docs/monitoring.md, AUQ spans): ``uncertainty.estimate`` (every step),
``uncertainty.semantic`` (when System 2 ran), ``uncertainty.escalate`` (HIGH, CRITICAL, or a MEDIUM
step paused by the irreversible override).

Only ``opentelemetry-api`` is required: without a configured tracer provider every span is a no-op.
:func:`configure_otlp` installs an OTLP exporter from the optional ``otlp`` extra.
"""

from __future__ import annotations

from typing import Any, Mapping

from opentelemetry import trace

from mlx_sdm.errors import MissingDependencyError

TRACER_NAME = "mlx_sdm.monitor"
SPAN_ESTIMATE = "uncertainty.estimate"
SPAN_SEMANTIC = "uncertainty.semantic"
SPAN_ESCALATE = "uncertainty.escalate"


def get_tracer(provider: "trace.TracerProvider | None" = None) -> trace.Tracer:
    """The monitor's tracer: from ``provider`` if given, else the global one (a no-op by default)."""
    return trace.get_tracer(TRACER_NAME, tracer_provider=provider)


def clean_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """OTel attributes cannot be null: drop None values (missing confidences are omitted)."""
    return {k: v for k, v in attributes.items() if v is not None}


def emit(tracer: trace.Tracer, name: str, attributes: Mapping[str, Any]) -> None:
    with tracer.start_as_current_span(name, attributes=clean_attributes(attributes)):
        pass


def configure_otlp(endpoint: str | None = None, service_name: str = "mlx-sdm") -> "trace.TracerProvider":
    """Install a global tracer provider exporting spans over OTLP/gRPC (needs ``mlx-sdm[otlp]``)."""
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise MissingDependencyError("OTLP export needs the otlp extra: pip install 'mlx-sdm[otlp]'") from None
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider
