"""The scripted OpenAI-compatible planner of the serving tests: a real HTTP server (FastAPI on uvicorn,
loopback) whose answers a test sets. The fixtures that start it are in ``conftest.py``; tests that name its
type import it from here."""

from __future__ import annotations

from typing import Any

from fastapi import Request

PLANNER_NAME = "planner"
"""The model id the scripted planner and the test vLLM server serve."""


class ScriptedPlanner:
    """A real OpenAI-compatible HTTP server (FastAPI on uvicorn, loopback) that answers every chat
    completion with ``completion``, or with HTTP ``status`` when set, after ``delay_s``.

    A call with ``n`` > 1 (execution-guided decoding's samples) gets ``samples`` instead.

    It stands for a trained planner in tests of what the API does with a given completion; the client,
    the HTTP path and the parsing are the real ones.
    """

    def __init__(self) -> None:
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse

        from serving.http.server import ServerThread

        self.completion = ""
        self.models = [PLANNER_NAME]
        """The model ids ``/v1/models`` lists."""
        self.samples: list[str] = [""]
        """What a call with ``n`` > 1 answers, cycled to ``n`` choices (sent in reverse index order)."""
        self.status = 200
        self.usage: dict[str, int] | None = None
        """The ``usage`` the answers report (none when None, as some endpoints do)."""
        self.delay_s = 0.0
        self.calls = 0
        self.bodies: list[dict[str, Any]] = []
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": name, "object": "model"} for name in self.models]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> JSONResponse:
            import asyncio

            self.calls += 1
            self.bodies.append(await request.json())
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if self.status != 200:
                return JSONResponse({"error": "scripted"}, status_code=self.status)
            n = int(self.bodies[-1].get("n") or 1)
            texts = [self.completion] if n == 1 else [self.samples[i % len(self.samples)] for i in range(n)]
            choices = [{"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": t}}
                       for i, t in reversed(list(enumerate(texts)))]  # fmt: skip
            body: dict[str, object] = {"id": "c", "object": "chat.completion", "model": PLANNER_NAME,
                                       "choices": choices}  # fmt: skip
            if self.usage is not None:
                body["usage"] = self.usage
            return JSONResponse(body)

        self.server = ServerThread(app).start()
        self.url = self.server.url + "/v1"

    def stop(self) -> None:
        self.server.stop()


FAMILIAR_REQUEST = "wireless headphones under $200"
GATE_TRAINING = (FAMILIAR_REQUEST, "wireless headphones under $150", "bluetooth headphones under $100 with good reviews",
                 "wireless earbuds under $80", "noise cancelling headphones below $300")  # fmt: skip
"""The training requests of the ``gated_card`` fixture's familiarity gate (``FAMILIAR_REQUEST`` is one of them)."""
