"""The query API's wire format: the request and response bodies of ``/v1/search``, ``/v1/plan`` and
``/v1/execute``, and the one error body (pydantic only; no web framework is imported here)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Domain = Literal["ecommerce", "email"]


class SearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, description="The request in natural language.")
    domain: Domain = "ecommerce"
    k: int = Field(default=10, ge=1)
    fields: list[str] | None = Field(default=None, description="Fields returned per result.")


class PlanIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1)
    domain: Domain = "ecommerce"


class ExecuteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    program: dict[str, Any] | str = Field(
        description="A program (JSON object or its text), DESIGN.md section 3."
    )
    domain: Domain = "ecommerce"
    k: int = Field(default=10, ge=1)
    fields: list[str] | None = None


class ResultOut(BaseModel):
    rank: int
    id: str
    score: float
    fields: dict[str, Any]


class PlaceholderOut(BaseModel):
    name: str
    type: str
    field: str
    query: str
    mode: str
    candidates: list[str]


class FallbackOut(BaseModel):
    reason: str
    detail: str


class GuidedOut(BaseModel):
    """How execution-guided decoding answered: the greedy program's failure, and the samples' vote."""

    reason: str
    detail: str
    samples: int
    """Samples asked for."""
    ran: int
    """Samples that were programs and ranked something."""
    agreeing: int
    """Samples whose ranking is the one answered."""


class FusionOut(BaseModel):
    """How a fused answer was made (``serving.api.fuse``): the planner's programs and the self-querying
    retriever, fused by weighted reciprocal rank."""

    programs: int
    """Planner programs asked for: the program and its samples (the program alone for a familiar search it
    answered)."""
    ran: int
    """Programs that ran (one of them is the answer's ``program``)."""
    partner: str
    """The retriever fused with them (``self-query``)."""
    weight: float
    """The retriever's weight; each program weighs 1."""
    filter: str | None
    """The Milvus filter the retriever parsed from the request."""
    semantic_query: str
    """What the retriever searched for under that filter."""
    partner_ids: list[str]
    """The retriever's own ranking."""
    unanimous: bool = False
    """The programs all ranked the same and ``serving.api.fuse_gate`` is ``unanimous``: the planner's ranking
    answered alone (the results are the program's own)."""
    familiarity: float | None = None
    """Under ``serving.api.fuse_gate: familiar``, the request's similarity to the nearest training request."""
    familiar: bool = False
    """That similarity reached the planner's threshold and its program ranked something: the program's ranking
    answered alone, run before any sample was drawn (no samples, no retriever)."""

    @property
    def alone(self) -> bool:
        """Whether a gate let the planner's ranking answer alone (nothing was fused)."""
        return self.unanimous or self.familiar


class SearchOut(BaseModel):
    request_id: str
    domain: str
    query: str | None = None
    source: Literal["planner", "fallback", "program"]
    fallback: FallbackOut | None = None
    guided: GuidedOut | None = None
    """Set when the planner's first program failed and a sampled one answered (``repairs`` then holds
    ``execution_guided``)."""
    fusion: FusionOut | None = None
    """Set when the results fuse the planner's programs with the self-querying retriever (``repairs`` then
    holds ``fused``); ``program`` is the planner's first program that ran."""
    program: dict[str, Any]
    planner_program: dict[str, Any] | None = None
    """What the planner wrote first when it failed (it parsed but did not run), under the fallback or a
    guided answer."""
    repairs: list[str] = []
    placeholders: list[PlaceholderOut]
    sql: str
    results: list[ResultOut]
    timings: dict[str, float]


class PlanOut(BaseModel):
    request_id: str
    domain: str
    program: dict[str, Any]
    completion: str
    repairs: list[str]
    timings: dict[str, float]


class ErrorOut(BaseModel):
    error: str
    detail: str
