"""The OpenAI chat-completions wire format, as pydantic models (request and response).

Both ends use them: ``envlab serve-model`` validates requests and builds responses with them,
and ``OpenAICompatModel`` validates what any server sends back. Response models accept unknown
fields and missing optional ones, so replies of vLLM, SGLang, llama.cpp and hosted APIs all fit.

Two non-standard fields carry token ids, as vLLM's extension does: ``prompt_token_ids`` on the
response and ``token_ids`` on each choice. Per-token logprobs are OpenAI's
``choices[i].logprobs.content``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(_Lenient):
    name: str = ""
    arguments: str = ""
    """A JSON object as text; whatever the model wrote, even when it is not valid JSON."""


class WireToolCall(_Lenient):
    id: str = ""
    type: str = "function"
    function: FunctionCall = Field(default_factory=FunctionCall)


class ChatMessage(_Lenient):
    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[WireToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The content as plain text (text parts of a multi-part content joined)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")


class ChatRequest(BaseModel):
    """``POST /v1/chat/completions``; fields a server does not know are ignored."""

    model_config = ConfigDict(extra="ignore")

    model: str = ""
    messages: list[ChatMessage]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    n: int = 1
    stream: bool = False
    ignore_eos: bool = False
    """vLLM's extension: go on past the end-of-turn token, up to ``max_tokens`` (benchmarks,
    tests of the engine's limits)."""


class TopLogprob(_Lenient):
    token: str = ""
    logprob: float = 0.0
    bytes: list[int] | None = None


class TokenLogprob(_Lenient):
    token: str = ""
    logprob: float = 0.0
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(_Lenient):
    content: list[TokenLogprob] | None = None


class AssistantMessage(_Lenient):
    role: str = "assistant"
    content: str | None = None
    tool_calls: list[WireToolCall] | None = None


class Choice(_Lenient):
    index: int = 0
    message: AssistantMessage = Field(default_factory=AssistantMessage)
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None
    token_ids: list[int] | None = None
    """Completion token ids (vLLM's extension); envlab's server always fills it."""


class Usage(_Lenient):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ChatResponse(_Lenient):
    id: str = ""
    object: str = "chat.completion"
    created: int = 0
    model: str = ""
    choices: list[Choice]
    usage: Usage | None = None
    prompt_token_ids: list[int] | None = None
    """Prompt token ids (vLLM's extension); envlab's server always fills it."""


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "envlab"
    weights_hash: str | None = None
    """sha256 of the weights file (an envlab extension)."""


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(BaseModel):
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
