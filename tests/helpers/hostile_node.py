"""A hostile node facing the client: a real aiohttp server on loopback, on its own thread, that
forwards every request to a real node and rewrites the request or the answer as an attacker
would (issue 22: a genuine receipt beside attacker text, a genuine receipt for another request,
a receipt a fresh key signed for a made-up model). Raw handlers stand for answers no rewrite of
JSON can make: a huge body, a trickle.
"""

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

Rewrite = Callable[[str, object], object]
"""(path, parsed JSON) -> the JSON to use instead."""


class HostileNode:
    """Forwards to ``real_url``; ``on_request`` rewrites request bodies, ``on_answer`` answers,
    ``raw[path]`` replaces a route's handler outright."""

    def __init__(self, real_url: str, on_request: Rewrite | None = None, on_answer: Rewrite | None = None,
                 raw: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] | None = None):
        self.real_url = real_url
        self.on_request = on_request or (lambda path, body: body)
        self.on_answer = on_answer or (lambda path, body: body)
        self.raw = raw or {}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="hostile-node", daemon=True)
        self.thread.start()
        self.runner, port = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)
        self.url = f"http://127.0.0.1:{port}"

    async def _start(self):
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, runner.addresses[0][1]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path in self.raw:
            return await self.raw[request.path](request)
        raw = await request.read()
        body = self.on_request(request.path, json.loads(raw)) if raw else None
        async with aiohttp.ClientSession() as session:
            async with session.request(request.method, self.real_url + request.path_qs, json=body) as answer:
                status, data = answer.status, await answer.json(content_type=None)
        return web.json_response(self.on_answer(request.path, data), status=status)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
