"""Validate a real response of a node against the OpenAPI document it serves (node/api/openapi.py)."""

from jsonschema import Draft202012Validator


def get_response_schema(document: dict, method: str, path: str, status: int) -> dict:
    """The JSON Schema the document gives for ``method path`` answering ``status`` (a path as the table writes it)."""
    operation = document["paths"][path][method.lower()]
    response = operation["responses"][str(status)]
    return response["content"]["application/json"]["schema"]


def validate_response(document: dict, method: str, path: str, status: int, body: object) -> None:
    """Raise jsonschema's ValidationError when ``body`` is not what the document says ``method path`` answers."""
    schema = {"components": document["components"], **get_response_schema(document, method, path, status)}
    Draft202012Validator(schema).validate(body)


def validate_schema(document: dict, name: str, body: object) -> None:
    """Raise when ``body`` is not an instance of the component schema ``name``."""
    Draft202012Validator({"components": document["components"], "$ref": f"#/components/schemas/{name}"}).validate(body)
