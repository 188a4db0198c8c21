"""Every node serves the explorer's files (package data, no CDN); without the dispatcher role its
JSON routes say why there is no network view."""

import re


async def test_the_page_and_its_files_are_served_and_reference_nothing_external(node, http):
    async with http.get(node.url + "/explorer") as response:
        assert response.status == 200 and response.content_type == "text/html"
        page = await response.text()
    assert "VeriLLM explorer" in page
    for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
        async with http.get(f"{node.url}/explorer/{name}") as response:
            assert response.status == 200 and response.content_type == kind
            page += await response.text()
    assert not re.search(r"https?://", page), "the explorer must not load anything from outside the node"
    async with http.get(node.url + "/explorer/secret.txt") as response:
        assert response.status == 404


async def test_without_the_dispatcher_the_json_routes_say_so(node, http):
    for path in ("/v1/verillm/explorer/network", "/v1/verillm/explorer/jobs", "/v1/verillm/explorer/jobs/0x" + "00" * 32):
        async with http.get(node.url + path) as response:
            body = await response.json()
            assert response.status == 404 and "without the networked dispatcher" in body["error"]["message"], (path, body)
