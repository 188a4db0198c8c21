"""A max_tokens above the node's limit is refused naming that limit, not the u64 encoding ceiling."""

import json


async def _post(http, url, body):
    async with http.post(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}) as response:
        return response.status, await response.json(content_type=None)


async def test_max_tokens_error_names_the_nodes_limit(start, http):
    node = await start(limits={"max_new_tokens": 24})
    for path, key, extra in (("/v1/completions", "max_tokens", {"prompt": "hi"}),
                             ("/v1/chat/completions", "max_completion_tokens", {"messages": [{"role": "user", "content": "hi"}]})):
        for value in (25, 2**64):
            status, body = await _post(http, node.url + path, {"model": "tiny", key: value, **extra})
            message = body["error"]["message"]
            assert status == 400 and body["error"]["code"] == "invalid_input", body
            assert f"{key}: {value} exceeds this node's limit of 24" in message and str(2**64 - 1) not in message, message
    status, body = await _post(http, node.url + "/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 0})
    assert status == 400 and "between 1 and 24" in body["error"]["message"], body
