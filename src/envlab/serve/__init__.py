"""``envlab serve``: environments over OpenEnv's WebSocket protocol.

``wire`` (pure pydantic) is the protocol both the server and ``RemoteEnv`` use; ``app`` builds the
FastAPI application (FastAPI and uvicorn are imported only there).
"""
