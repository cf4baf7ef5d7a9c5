"""Models: an OpenAI-compatible client, the local GGUF engine and the server around it.

``envlab.models`` imports only httpx and pydantic; the engine (llama-cpp-python, or torch and
transformers: ``models.local``) and the server (FastAPI, uvicorn) are imported when first used.
"""

from envlab.models.client import (
    ModelReply,
    ModelRequestError,
    OpenAICompatModel,
    RetryPolicy,
    Sampling,
)
from envlab.models.toolcalls import ParsedText, TextToolCall, parse_tool_calls

__all__ = [
    "ModelReply",
    "ModelRequestError",
    "OpenAICompatModel",
    "ParsedText",
    "RetryPolicy",
    "Sampling",
    "TextToolCall",
    "parse_tool_calls",
]
