"""The GPU recipe (``envlab.train.served``) on CPU: everything but the kernels. A real HTTP
server on 127.0.0.1 plays vLLM's part over the tiny model (OpenAI chat completions with
``prompt_token_ids``, each choice's ``token_ids`` and the sampled tokens' logprobs at the
request's temperature, and a weight reload from a folder); ``envlab train`` learns from its
episodes and pushes the weights after each step. The CUDA test runs the same recipe against a
real vLLM and is skipped where there is no GPU."""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")
web = pytest.importorskip("aiohttp.web")

from envlab.train.loop import TrainConfig, train  # noqa: E402
from envlab.train.served import DiskReload, ServedLMLearner  # noqa: E402
from tests.train.conftest import tiny_model, tiny_tokenizer  # noqa: E402
from tests.train.test_lm_learner import AsciiEnv  # noqa: E402


class FakeVLLM:
    """vLLM's surface that the recipe uses, over a model of this process (sampling from a
    generator seeded by the request's ``seed``)."""

    def __init__(self, model: Any, tok: Any) -> None:
        self.model, self.tok, self.reloads = model, tok, []
        self.requests = 0
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/update_weights_from_disk", self.reload)
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def _sample(self, body: dict[str, Any]) -> tuple[list[int], list[int], list[float]]:
        text = self.tok.apply_chat_template(
            body["messages"], tokenize=False, add_generation_prompt=True
        )
        prompt = list(self.tok(text, add_special_tokens=False)["input_ids"])
        gen = torch.Generator().manual_seed(int(body.get("seed") or 0))
        ids, out, lps = list(prompt), [], []
        with torch.no_grad():
            for _ in range(int(body.get("max_tokens") or 16)):
                logits = self.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
                logp = torch.log_softmax(logits / float(body["temperature"]), -1)
                tok = int(torch.multinomial(logp.exp(), 1, generator=gen))
                out.append(tok)
                lps.append(float(logp[tok]))
                ids.append(tok)
                if tok == self.tok.eos_token_id:
                    break
        return prompt, out, lps

    async def chat(self, request: Any) -> Any:
        body = await request.json()
        assert body["logprobs"] is True and body["return_token_ids"] is True
        self.requests += 1
        prompt, out, lps = self._sample(body)
        eos = bool(out) and out[-1] == self.tok.eos_token_id
        names = self.tok.convert_ids_to_tokens(out)
        content = [{"token": n, "logprob": lp} for n, lp in zip(names, lps, strict=True)]
        return web.json_response({
            "id": "fake", "object": "chat.completion", "model": body["model"],
            "prompt_token_ids": prompt,
            "choices": [{
                "index": 0, "finish_reason": "stop" if eos else "length", "token_ids": out,
                "message": {"role": "assistant",
                            "content": self.tok.decode(out, skip_special_tokens=True)},
                "logprobs": {"content": content},
            }],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(out)},
        })  # fmt: skip

    async def reload(self, request: Any) -> Any:
        from transformers import AutoModelForCausalLM

        path = (await request.json())["model_path"]
        loaded = AutoModelForCausalLM.from_pretrained(path)
        self.model.load_state_dict(loaded.state_dict())
        self.reloads.append(Path(path).name)
        return web.json_response({"success": True})


@pytest.fixture
def served(tmp_path: Path) -> Any:
    tok = tiny_tokenizer()
    server = FakeVLLM(tiny_model(len(tok)), tok)  # the same weights as the learner's start
    yield server, tok
    server.close()


def _learner(
    server: FakeVLLM, tok: Any, tmp: Path, *, max_tokens: int, sync_every: int = 1
) -> ServedLMLearner:
    sync = DiskReload.sglang(server.base_url, tmp / "weights")
    agent = {"max_tokens": max_tokens, "max_turns": 1, "instructions": ""}
    learner = ServedLMLearner(
        tiny_model(len(tok)), tok, base_url=server.base_url, served_model="tiny", sync=sync,
        sync_every=sync_every, lr=3e-3, agent_kwargs=agent,
    )  # fmt: skip
    return learner


def test_served_rollouts_train_and_the_server_gets_each_version(
    served: tuple[FakeVLLM, Any], tmp_path: Path
) -> None:
    from envlab.runs import TrajectoryStore

    server, tok = served
    learner = _learner(server, tok, tmp_path, max_tokens=10)
    spec = AsciiEnv()
    config = TrainConfig(steps=2, groups_per_step=2, group_size=3, sync=True, concurrency=3)
    result = asyncio.run(
        train(spec, spec.tasks(), learner, out_dir=tmp_path / "run", config=config, command=["t"])
    )
    assert learner.version == 2 and server.reloads == ["v1", "v2"] and server.requests >= 12
    first, second = result.metrics
    # the server's tokens and logprobs are the learner's own: the first ratio is exact
    assert abs(first.learner["ratio_mean"] - 1.0) < 1e-4 and first.learner["tokens"] > 0
    assert second.learner["server_version"] == 2.0
    trajs = TrajectoryStore(result.run_dir / "trajectories.jsonl").load()
    versions = {t.info["policy_version"] for t in trajs}
    assert versions == {0, 1}
    assert all(t.agent.model_id == f"tiny@v{t.info['policy_version']}" for t in trajs)
    assert all(t.tokens is not None and t.tokens.logprobs for t in trajs)
    for k, v in learner.model.state_dict().items():  # the server holds the learner's weights
        assert torch.equal(v, server.model.state_dict()[k])


def test_with_a_push_every_two_steps_samples_carry_the_servers_version(
    served: tuple[FakeVLLM, Any], tmp_path: Path
) -> None:
    from envlab.runs import TrajectoryStore

    server, tok = served
    learner = _learner(server, tok, tmp_path, max_tokens=6, sync_every=2)
    spec = AsciiEnv()
    config = TrainConfig(steps=3, groups_per_step=1, group_size=2, sync=False, max_staleness=2)
    result = asyncio.run(
        train(spec, spec.tasks(), learner, out_dir=tmp_path / "run", config=config, command=["t"])
    )
    assert server.reloads == ["v2"] and learner.synced == 2
    trajs = TrajectoryStore(result.run_dir / "trajectories.jsonl").load()
    assert {t.info["policy_version"] for t in trajs} <= {0, 2}  # never a version not served
    assert all(int(age) <= 2 for m in result.metrics for age in m.staleness)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.skipif(shutil.which("vllm") is None, reason="needs vllm (pip install vllm)")
def test_the_recipe_against_a_real_vllm_on_a_gpu(tmp_path: Path) -> None:
    """docs/train-gpu.md's commands, shortened: SmolLM2 from the embedded GGUF saved as a
    transformers folder, served by vLLM with processed logprobs, two learner steps on CUDA."""
    from tests.train.gpu_recipe import run_recipe

    figures = run_recipe(tmp_path, steps=2)
    assert figures["first_ratio"] == pytest.approx(1.0, abs=0.05)
    assert figures["reloads"] == 2
