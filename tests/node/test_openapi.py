"""The node's OpenAPI document (node/api/openapi.py): one truth with the routes. It describes every
route the aiohttp router holds and no other, its schemas are valid JSON Schema whose references all
resolve, the node serves it, and real responses of a running node (tiny model, aiohttp on loopback,
SQLite on disk) are what it says: completions, chat, models, info, health, and the error shape.
The networked routes' bodies are validated against it in tests/node/dispatcher/test_network_route.py."""

import json

import jsonschema
import pytest
from aiohttp import web
from jsonschema import Draft202012Validator

from verillm.node.api.openapi import OPERATIONS, compute_openapi_document
from verillm.node.routes import setup_routes
from helpers.openapi import validate_response, validate_schema


def compute_router_routes(app: web.Application) -> set[tuple[str, str]]:
    """(method, path) of every route the router holds; HEAD is aiohttp's twin of each GET."""
    routes = set()
    for route in app.router.routes():
        info = route.resource.get_info()
        path = info.get("path") or info.get("formatter")
        if route.method != "HEAD":
            routes.add((route.method, path))
    return routes


def compute_document_routes(document: dict) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in document["paths"].items() for method in item}


def test_the_document_describes_every_route_and_no_other():
    app = web.Application()
    setup_routes(app)
    document = compute_openapi_document("test")
    routed, described = compute_router_routes(app), compute_document_routes(document)
    assert routed - described == set(), f"routes the OpenAPI document does not describe: {sorted(routed - described)}"
    assert described - routed == set(), f"the OpenAPI document names routes that do not exist: {sorted(described - routed)}"
    assert len(OPERATIONS) == len(routed)  # one row per route, none twice


def test_a_route_added_without_its_description_is_found():
    """The check above can fail: a route the table lacks, and a row whose route was removed."""
    app = web.Application()
    setup_routes(app)
    app.router.add_get("/v1/verillm/undocumented", lambda request: web.json_response({}))
    assert compute_router_routes(app) - compute_document_routes(compute_openapi_document("test")) == {("GET", "/v1/verillm/undocumented")}


def test_every_schema_is_valid_and_every_reference_resolves():
    document = compute_openapi_document("test")
    for name, schema in document["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema)
    refs = set()

    def walk(value):
        if isinstance(value, dict):
            refs.update([value["$ref"]] if "$ref" in value else [])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
    walk(document)
    names = {"#/components/schemas/" + n for n in document["components"]["schemas"]}
    assert refs and refs <= names, sorted(refs - names)
    for path, item in document["paths"].items():
        for method, operation in item.items():
            assert operation["responses"]["500"]["content"]["application/json"]["schema"]["$ref"].endswith("/Error"), (method, path)
            named = {p["name"] for p in operation.get("parameters", ()) if p["in"] == "path"}
            assert named == {part[1:-1] for part in path.split("/") if part.startswith("{")}, (method, path)


def test_a_body_that_breaks_a_schema_is_refused():
    """The validation below can fail: a completion without its receipt, an error without its code."""
    document = compute_openapi_document("test")
    with pytest.raises(jsonschema.ValidationError):
        validate_schema(document, "Error", {"error": {"message": "x", "type": "invalid_request_error", "param": None}})
    with pytest.raises(jsonschema.ValidationError):
        validate_schema(document, "VerillmField", {"job_hash": "0x" + "00" * 32})


async def test_a_running_node_serves_the_document_and_answers_what_it_says(node, http):
    async with http.get(f"{node.url}/v1/openapi.json") as response:
        assert response.status == 200
        document = await response.json()
    assert document["openapi"] == "3.1.0" and compute_document_routes(document) == compute_router_routes(node.app)
    validate_response(document, "GET", "/v1/openapi.json", 200, document)

    async def check(method: str, path: str, url_path: str, body: dict | None = None, status: int = 200) -> dict:
        async with http.request(method, node.url + url_path, json=body) as response:
            assert response.status == status, await response.text()
            answer = await response.json()
        validate_response(document, method, path, status, answer)
        return answer

    models = await check("GET", "/v1/models", "/v1/models")
    name = models["data"][0]["id"]
    completion = await check("POST", "/v1/completions", "/v1/completions",
                             {"model": name, "prompt": "Hello", "max_tokens": 3, "temperature": 0, "verillm": {"nonce": "0x" + "ab" * 32}})
    assert completion["verillm"]["job"]["nonce"] == "0x" + "ab" * 32
    await check("POST", "/v1/chat/completions", "/v1/chat/completions",
                {"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0})
    await check("GET", "/v1/verillm/info", "/v1/verillm/info")
    await check("GET", "/healthz", "/healthz")
    status_path = completion["verillm"]["status_url"].split("127.0.0.1", 1)[1].split("/", 1)[1]
    await check("GET", "/v1/verillm/jobs/{job_hash}", "/" + status_path)
    # errors, one shape: a field the message names, an unknown model, a role this node does not run
    error = await check("POST", "/v1/completions", "/v1/completions", {"model": name, "prompt": "Hi", "top_p": 0}, status=400)
    assert error["error"]["param"] == "top_p"
    await check("POST", "/v1/completions", "/v1/completions", {"model": "no-such-model", "prompt": "Hi"}, status=404)
    await check("GET", "/v1/verillm/network", "/v1/verillm/network", status=404)
    await check("GET", "/v1/verillm/audits/{job_hash}", "/v1/verillm/audits/" + completion["verillm"]["job_hash"], status=404)
    await check("GET", "/v1/verillm/jobs/{job_hash}", "/v1/verillm/jobs/0x12", status=400)
    assert json.dumps(document)  # plain JSON, nothing a client cannot parse
