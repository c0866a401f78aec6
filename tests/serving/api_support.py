"""The query API on a loopback port (a real server thread and HTTP client), and its metrics as numbers."""

from __future__ import annotations

import httpx

from serving.api.app import create_app
from serving.engine import Engine
from serving.http.server import ServerThread
from serving.planner import PlannerSettings
from serving.settings import ApiSettings


class Api:
    def __init__(
        self, engines: dict[str, Engine], planner: PlannerSettings | None, settings: ApiSettings
    ) -> None:
        self.server = ServerThread(create_app(engines, planner, settings)).start()
        self.url = self.server.url
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def close(self) -> None:
        self.client.close()
        self.server.stop()


def metric(api: Api, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(api.client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0
