"""A `spanc serve` replica as an NVIDIA Dynamo worker (issue 27).

Dynamo's frontend (OpenAI HTTP, tokenizer, chat template, KV-aware router)
sends each request here as token ids; this forwards them to the replica's
/v1/completions as a token-id prompt, streams the answer back as token ids,
and points Dynamo's KV event subscriber at the replica's --kv-events
socket (vLLM's format), so the router sees every block the replica stores
and evicts. One adapter per replica; Dynamo 1.6.1's Python backend API
(dynamo.common.backend.LLMEngine), file discovery and loopback planes:

    DYN_FILE_KV=DIR python spanc_worker.py --spanc http://127.0.0.1:8001 \\
        --kv-events tcp://127.0.0.1:5557 --model-dir CARD --served-model-name M

CARD is the folder model_card.py writes from the replica's GGUF. The block
size and block count are read from the replica's /metrics
(vllm:cache_config_info), so the router's arithmetic matches the cache.
When the replica stops answering, the adapter ends (its registration goes
with it) instead of taking requests it cannot serve, and a request it
could not finish ends unfinished, so that a frontend started with
--migration-limit moves it to another worker instead of failing it.
"""

import argparse
import asyncio
import json
import logging
import os
import re
import signal
import sys
from typing import Any, AsyncGenerator, Optional

import aiohttp
from tokenizers import Tokenizer

from dynamo.common.backend import (EngineConfig, LLMEngine, LlmRegistration,
                                   WorkerConfig)
from dynamo.common.backend.publisher import ZmqSource
from dynamo.common.backend.run import run

log = logging.getLogger("spanc_worker")


async def read_replica(base_url: str, headers) -> tuple[str, int, int]:
    """The replica's model id (/v1/models), block size and number of
    blocks (/metrics)."""
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(base_url + "/v1/models") as response:
            model = (await response.json())["data"][0]["id"]
        async with session.get(base_url + "/metrics") as response:
            text = await response.text()
    found = re.search(r'vllm:cache_config_info\{[^}]*block_size="(\d+)"'
                      r'[^}]*num_gpu_blocks="(\d+)"', text)
    if not found:
        raise RuntimeError("no vllm:cache_config_info on %s/metrics" %
                           base_url)
    return model, int(found.group(1)), int(found.group(2))


class SpancEngine(LLMEngine):
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.base_url = args.spanc.rstrip("/")
        self.tokenizer = Tokenizer.from_file(
            os.path.join(args.model_dir, "tokenizer.json"))
        with open(os.path.join(args.model_dir, "config.json")) as config:
            self.context_length = json.load(config)["max_position_embeddings"]
        self.session: Optional[aiohttp.ClientSession] = None
        self.watchdog: Optional[asyncio.Task] = None
        self.leaving = False

    @classmethod
    async def from_args(cls, argv=None):
        parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
        parser.add_argument("--spanc", required=True,
                            help="the replica's base URL")
        parser.add_argument("--kv-events", required=True,
                            help="the replica's --kv-events address")
        parser.add_argument("--model-dir", required=True,
                            help="model_card.py's folder for the GGUF")
        parser.add_argument("--served-model-name", required=True)
        parser.add_argument("--namespace", default="spanc")
        parser.add_argument("--component", default="backend")
        parser.add_argument("--api-key", default=os.environ.get(
            "SPANC_API_KEY"))
        args = parser.parse_args(argv)
        engine = cls(args)
        config = WorkerConfig(
            namespace=args.namespace, component=args.component,
            endpoint="generate", model_name=args.model_dir,
            served_model_name=args.served_model_name,
            discovery_backend="file", request_plane="tcp",
            event_plane="zmq", enable_local_indexer=True)
        return engine, config

    async def start(self, worker_id: int) -> EngineConfig:
        del worker_id
        headers = {}
        if self.args.api_key:
            headers["Authorization"] = "Bearer " + self.args.api_key
        self.replica_model, block_size, num_blocks = await read_replica(
            self.base_url, headers)
        self.session = aiohttp.ClientSession(
            headers=headers, timeout=aiohttp.ClientTimeout(total=None,
                                                           sock_connect=5))
        self.watchdog = asyncio.create_task(self._watch())
        return EngineConfig(
            model=self.args.model_dir,
            served_model_name=self.args.served_model_name,
            llm=LlmRegistration(context_length=self.context_length,
                                kv_cache_block_size=block_size,
                                total_kv_blocks=num_blocks))

    async def kv_event_sources(self):
        # Dynamo subscribes to the replica's vLLM-format PUB socket itself.
        return [ZmqSource(endpoint=self.args.kv_events)]

    async def _watch(self):
        """Ends the process once the replica stops answering /health, so
        Dynamo stops routing to it."""
        failures = 0
        while True:
            await asyncio.sleep(0.5)
            try:
                async with self.session.get(
                        self.base_url + "/health",
                        timeout=aiohttp.ClientTimeout(total=2)) as response:
                    failures = 0 if response.status == 200 else failures + 1
            except (aiohttp.ClientError, asyncio.TimeoutError):
                failures += 1
            if failures >= 2:
                log.error("replica %s is gone: stopping", self.base_url)
                self._leave()
                return

    def _leave(self):
        """The Worker's graceful shutdown (it deregisters), once."""
        if not self.leaving:
            self.leaving = True
            os.kill(os.getpid(), signal.SIGTERM)

    async def generate(self, request, context) -> AsyncGenerator[dict, None]:
        token_ids = list(request["token_ids"])
        sampling = request.get("sampling_options") or {}
        stop = request.get("stop_conditions") or {}
        body: dict[str, Any] = {
            "model": self.replica_model,
            "prompt": token_ids,
            "max_tokens": stop.get("max_tokens") or 256,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        for key in ("temperature", "top_p", "top_k", "seed"):
            if sampling.get(key) is not None:
                body[key] = sampling[key]
        usage, finish, sent = None, None, 0
        try:
            async with self.session.post(self.base_url + "/v1/completions",
                                         json=body) as response:
                if response.status != 200:
                    raise RuntimeError("replica answered %d: %s" % (
                        response.status, (await response.text())[:300]))
                async for raw in response.content:
                    line = raw.decode("utf-8").strip()
                    if not line.startswith("data: ") or \
                            line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[len("data: "):])
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    for choice in chunk.get("choices", []):
                        finish = choice.get("finish_reason") or finish
                        text = choice.get("text") or ""
                        if text:
                            ids = self.tokenizer.encode(
                                text, add_special_tokens=False).ids
                            sent += len(ids)
                            yield {"token_ids": ids, "index": 0}
                    if context.is_stopped():
                        return
        except (aiohttp.ClientConnectionError,
                aiohttp.ClientPayloadError) as error:
            # The replica is gone (or went mid-answer). Leave Dynamo now and
            # end the stream unfinished: a frontend run with
            # --migration-limit moves the request, and the tokens already
            # sent, to another worker instead of failing it.
            log.error("replica %s failed after %d tokens: %s", self.base_url,
                      sent, error)
            self._leave()
            return
        if finish is None:
            self._leave()
            return
        usage = usage or {}
        completion_usage = {
            "prompt_tokens": usage.get("prompt_tokens", len(token_ids)),
            "completion_tokens": usage.get("completion_tokens", 0),
            "total_tokens": usage.get("total_tokens", len(token_ids)),
        }
        cached = (usage.get("prompt_tokens_details") or {}).get(
            "cached_tokens")
        if cached is not None:
            completion_usage["prompt_tokens_details"] = {
                "cached_tokens": cached}
        yield {"token_ids": [], "index": 0,
               "finish_reason": finish or "stop",
               "completion_usage": completion_usage}

    async def cleanup(self):
        if self.watchdog:
            self.watchdog.cancel()
        if self.session:
            await self.session.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    run(SpancEngine)
