"""Every node serves the explorer's files (package data, no CDN); without the dispatcher role its
JSON routes say why there is no network view."""

import re

from verillm.node.api.explorer_views import STATIC_FILES


async def test_the_page_and_its_files_are_served_and_reference_nothing_external(node, http):
    async with http.get(node.url + "/explorer") as response:
        assert response.status == 200 and response.content_type == "text/html"
        page = await response.text()
    assert "VeriLLM explorer" in page
    scripts = {}
    for name, kind in STATIC_FILES.items():
        async with http.get(f"{node.url}/explorer/{name}") as response:
            assert response.status == 200 and response.content_type == kind, name
            text = await response.text()
        page += text
        if name.endswith(".js"):
            scripts[name] = text
    assert not re.search(r"https?://", page.replace("http://www.w3.org/2000/svg", "")), "the explorer must not load anything from outside the node"
    # Every module a script imports is one the node serves (a missing one blanks the whole page).
    imported = {m for text in scripts.values() for m in re.findall(r'from "\./([\w.]+)"', text)}
    assert imported and imported <= set(scripts), imported - set(scripts)
    async with http.get(node.url + "/explorer/secret.txt") as response:
        assert response.status == 404


async def test_without_the_dispatcher_the_json_routes_say_so(node, http):
    for path in ("network", "summary", "jobs", "jobs/0x" + "00" * 32, "audits", "audits/1", "nodes/0x" + "00" * 20, "batches/0", "blocks/1",
                 "txs/0x" + "00" * 32, "search?q=1"):
        async with http.get(node.url + "/v1/verillm/explorer/" + path) as response:
            body = await response.json()
            assert response.status == 404 and "without the networked dispatcher" in body["error"]["message"], (path, body)
