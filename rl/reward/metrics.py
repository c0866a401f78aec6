"""Prometheus metrics of the reward service, in a registry of its own (one per app).

Requests by status, programs scored, latency histograms (request and batch), batch sizes (the
coalescing), each layer's pass rate, the engines' cache hit rates, queue depth, requests in flight,
rejections and timeouts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from rl.reward.scorer import RewardItem, RewardResult
from rl.reward.terms import LAYERS

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)

CacheStats = Callable[[], dict[str, dict[str, dict[str, int]]]]


class _EngineCaches(Collector):
    """Hit rates and counts of every engine cache, read at scrape time."""

    def __init__(self, stats: CacheStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        rate = GaugeMetricFamily(
            "reward_engine_cache_hit_rate", "Hits / lookups of an engine cache.", labels=["domain", "cache"]
        )
        hits = CounterMetricFamily(
            "reward_engine_cache_hits", "Engine cache hits.", labels=["domain", "cache"]
        )
        misses = CounterMetricFamily(
            "reward_engine_cache_misses", "Engine cache misses.", labels=["domain", "cache"]
        )
        for domain, caches in self._stats().items():
            for cache, s in caches.items():
                h, m = int(s.get("hits", 0)), int(s.get("misses", 0))
                rate.add_metric([domain, cache], h / (h + m) if h + m else 0.0)
                hits.add_metric([domain, cache], h)
                misses.add_metric([domain, cache], m)
        yield rate
        yield hits
        yield misses


class _PassRates(Collector):
    def __init__(self, metrics: ServiceMetrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily(
            "reward_layer_pass_rate",
            "Share of scored items that earned a layer and every layer before it.",
            labels=["layer"],
        )
        seen = self._m.seen
        for layer in LAYERS:
            g.add_metric([layer], self._m.passed[layer] / seen if seen else 0.0)
        yield g


class ServiceMetrics:
    """The service's metrics; :meth:`observe_batch` records one scored batch."""

    def __init__(
        self, cache_stats: CacheStats, queue_depth: Callable[[], int], inflight: Callable[[], int]
    ) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("reward_requests", "Score requests by HTTP status.", ["status"], registry=r)
        self.scored = Counter("reward_programs_scored", "Items scored, by domain.", ["domain"], registry=r)
        self.request_seconds = Histogram(
            "reward_request_seconds", "Latency of a score request.", buckets=LATENCY_BUCKETS, registry=r
        )
        self.batch_seconds = Histogram(
            "reward_batch_seconds",
            "Time of one coalesced batch in the engines.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_items = Histogram(
            "reward_batch_items", "Items per coalesced batch.", buckets=BATCH_BUCKETS, registry=r
        )
        self.batch_requests = Histogram(
            "reward_batch_requests", "Requests merged into one batch.", buckets=BATCH_BUCKETS, registry=r
        )
        self.layer_passed = Counter(
            "reward_layer_passed",
            "Items that earned a layer and every layer before it in full.",
            ["layer"],
            registry=r,
        )
        self.term_sum = Counter(
            "reward_term_sum", "Sum of each term over scored items.", ["term"], registry=r
        )
        self.rejections = Counter("reward_rejections", "Requests refused, by reason.", ["reason"], registry=r)
        self.timeouts = Counter(
            "reward_timeouts", "Items answered S_e = 0 at the batch deadline.", registry=r
        )
        depth = Gauge("reward_queue_depth", "Items waiting to be scored.", registry=r)
        depth.set_function(lambda: float(queue_depth()))
        flight = Gauge("reward_requests_in_flight", "Score requests being served.", registry=r)
        flight.set_function(lambda: float(inflight()))
        self.passed = dict.fromkeys(LAYERS, 0)
        self.seen = 0
        r.register(_EngineCaches(cache_stats))
        r.register(_PassRates(self))

    def observe_batch(
        self, items: Sequence[RewardItem], results: Iterable[RewardResult], seconds: float, requests: int
    ) -> None:
        self.batch_seconds.observe(seconds)
        self.batch_items.observe(len(items))
        self.batch_requests.observe(requests)
        for item, res in zip(items, results, strict=True):
            self.scored.labels(item.domain).inc()
            self.seen += 1
            t = res.terms
            earned = True  # a layer is earned only when every layer before it is (the gating of R)
            for layer, value, name in zip(
                LAYERS, (t.s_f, t.s_e, t.s_r, t.s_l), ("s_f", "s_e", "s_r", "s_l"), strict=True
            ):
                self.term_sum.labels(name).inc(value)
                earned = earned and value >= 1.0
                if earned:
                    self.passed[layer] += 1
                    self.layer_passed.labels(layer).inc()
            if res.timed_out:
                self.timeouts.inc()
