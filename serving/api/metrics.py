"""The query API's Prometheus metrics (``/metrics``); no web framework is imported here."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ApiMetrics:
    """The API's Prometheus metrics, in a registry of their own."""

    def __init__(self, inflight: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        p = "proretrieval_api_"
        self.requests = Counter(
            p + "requests_total", "Requests by route and status", ["route", "status"], registry=self.registry
        )
        self.seconds = Histogram(
            p + "request_seconds", "Request latency by route", ["route"], registry=self.registry
        )
        self.stages = Histogram(
            p + "stage_seconds", "Latency by stage (plan, engine, fetch, fallback, guided, guided_engine, fused_engine)", ["stage"], registry=self.registry,
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10),
        )  # fmt: skip
        self.fallbacks = Counter(
            p + "fallbacks_total",
            "Searches answered by the fallback, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.guided = Counter(p + "guided_total", "Execution-guided second passes, by outcome (answered: a sample ran; "
                              "failed: none did, the fallback answered)", ["outcome"], registry=self.registry)  # fmt: skip
        self.fused = Counter(p + "fused_total", "Searches answered by fusing the planner's programs with the "
                             "self-querying retriever, by outcome (answered; failed: no program ran, the "
                             "fallback answered)", ["outcome"], registry=self.registry)  # fmt: skip
        self.rejections = Counter(
            p + "rejections_total", "Requests refused, by reason", ["reason"], registry=self.registry
        )
        self.inflight = Gauge(p + "inflight_requests", "Requests under /v1 in flight", registry=self.registry)
        self.inflight.set_function(lambda: float(inflight()))
