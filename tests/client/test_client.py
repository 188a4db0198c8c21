"""The SDK against a real node: sync and async clients, strict parsing, offline receipt checks."""

import dataclasses
import json

import openai
import pytest
from click.testing import CliRunner

from verillm.client import AsyncClient, Client, parse_completion, verify_receipt
from verillm.cli.complete import complete
from eth_utils import to_checksum_address

from verillm.errors import InvalidInput, InvalidProof, InvalidSignature, PromptTooLong, UnknownModel, VerillmError
from verillm.node.appkeys import APP_CONFIG, APP_DOMAIN, APP_KEY
from verillm.node.store.store import open_store
from verillm.spec.job import compute_job_hash
from verillm.spec.receipt import SigningDomain


def test_sync_complete_and_chat(threaded_node, served_tiny):
    domain = threaded_node.app[APP_DOMAIN]
    client = Client(threaded_node.url, model_id=served_tiny.model_id, domain=domain, tokenizer=served_tiny.tokenizer)
    completion = client.complete("The quick brown fox", max_tokens=5, temperature=0)
    assert len(completion.tokens) == 5 and completion.finish_reason == "length"
    assert completion.text == served_tiny.tokenizer.decode(list(completion.tokens), skip_special_tokens=True)
    # pinned model, domain and tokenizer: only the chain's view of the signer stays unchecked
    assert completion.verification.not_checked == ("signer's registration and stake (no chain: use --rpc-url / protocol=)",)
    assert completion.job_hash == compute_job_hash(completion.job) == completion.receipt.job_hash
    signer = verify_receipt(completion.receipt, domain, manifest=served_tiny.manifest, job=completion.job, output_tokens=completion.tokens)
    assert signer == to_checksum_address(threaded_node.app[APP_KEY].address)
    same = client.complete(tokens=completion.prompt_tokens, max_tokens=5, temperature=0)
    assert same.tokens == completion.tokens and same.job_hash != completion.job_hash
    chat = client.chat([{"role": "user", "content": "Hi"}], max_tokens=3, temperature=0.7, seed=11, top_k=40)
    assert chat.receipt.sampling.seed == 11 and chat.receipt.sampling.top_k == 40
    status = client.get_status(chat)  # its status_url carries the requester's read token
    assert status == client.get_status(chat)
    with pytest.raises(InvalidSignature):  # anyone else, without the token, is refused
        client.get_status(chat.job_hash)
    assert status["status"] == "done" and status["output_tokens"] == list(chat.tokens)


def test_receipt_checks_catch_tampering(threaded_node, served_tiny):
    completion = Client(threaded_node.url).complete("Hello", max_tokens=3, temperature=0)
    domain = threaded_node.app[APP_DOMAIN]
    kwargs = dict(model_id=served_tiny.model_id, job=completion.job, output_tokens=completion.tokens)
    verify_receipt(completion.receipt, domain, **kwargs)
    with pytest.raises(InvalidSignature):  # another deployment's domain
        verify_receipt(completion.receipt, SigningDomain(chain_id=1), **kwargs)
    with pytest.raises(InvalidProof, match="expected 0x"):
        verify_receipt(completion.receipt, domain, model_id=b"\x01" * 32)
    with pytest.raises(InvalidProof, match="worker"):
        verify_receipt(completion.receipt, domain, model_id=served_tiny.model_id, worker=b"\x02" * 20)
    with pytest.raises(InvalidProof, match="output hash"):
        verify_receipt(completion.receipt, domain, model_id=served_tiny.model_id, job=completion.job, output_tokens=completion.tokens[:-1] + (1,))
    forged = dataclasses.replace(completion.receipt, commitment_root=b"\x00" * 32)
    with pytest.raises(InvalidSignature):
        verify_receipt(forged, domain, **kwargs)


def test_sdk_takes_hex_ids_and_returns_printable_hex(threaded_node, served_tiny):
    client = Client(threaded_node.url)
    completion = client.complete("Hello", max_tokens=3, temperature=0)
    domain = threaded_node.app[APP_DOMAIN]
    model_hex = client.models()[0]["verillm"]["model_id"]  # what /v1/models reports: 0x-hex
    signer = verify_receipt(completion.receipt, domain, model_id=model_hex, worker=completion.worker,
                            job=completion.job, output_tokens=completion.tokens)
    assert isinstance(signer, str) and signer.startswith("0x") and len(signer) == 42
    assert signer == completion.worker == to_checksum_address(threaded_node.app[APP_KEY].address)
    assert completion.job_id == "0x" + completion.job_hash.hex()
    assert verify_receipt(completion.receipt, domain, model_id=model_hex[2:]) == signer  # bare hex too
    assert client.get_status(completion)["status"] == "done"  # the completion carries the requester's read token
    with pytest.raises(InvalidSignature, match="requester"):  # a bare job id (hex) is not enough to read the job
        client.get_status(completion.job_id)
    with pytest.raises(InvalidProof, match="expected 0x"):
        verify_receipt(completion.receipt, domain, model_id="0x" + "01" * 32)
    with pytest.raises(InvalidInput, match="model_id"):
        verify_receipt(completion.receipt, domain, model_id="0x1234")
    with pytest.raises(InvalidInput, match="model_id"):
        verify_receipt(completion.receipt, domain, model_id=12)


def test_parse_refuses_a_response_whose_tokens_disagree_with_the_receipt(threaded_node):
    import urllib.request

    body = json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 3, "temperature": 0}).encode()
    request = urllib.request.Request(threaded_node.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    response = json.loads(urllib.request.urlopen(request).read())
    parse_completion(response, chat=False)
    response["verillm"]["output_tokens"][0] += 1
    with pytest.raises(InvalidProof, match="output hash"):
        parse_completion(response, chat=False)


def test_errors_come_back_as_their_classes(threaded_node):
    client = Client(threaded_node.url)
    with pytest.raises(UnknownModel):
        client.complete("hi", model="gpt-4")
    with pytest.raises(PromptTooLong):
        client.complete(tokens=[5] * 5000)
    with pytest.raises(VerillmError, match="cannot reach"):
        Client("http://127.0.0.1:9", timeout_s=2).models()


async def test_async_client_and_audit_flag(threaded_node, served_tiny):
    async with AsyncClient(threaded_node.url) as client:
        completion = await client.complete(tokens=[5, 6, 7], max_tokens=4, temperature=0, audit=True)
        chat = await client.chat([{"role": "user", "content": "Hi"}], max_tokens=2, temperature=0)
        with pytest.raises(UnknownModel):
            await client.chat([{"role": "user", "content": "Hi"}], model="nope")
    verify_receipt(completion.receipt, threaded_node.app[APP_DOMAIN], model_id=served_tiny.model_id, job=completion.job, output_tokens=completion.tokens)
    assert chat.prompt_tokens == tuple(served_tiny.tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=True)["input_ids"])
    store = open_store(threaded_node.app[APP_CONFIG].store.path)  # the node's connection belongs to its thread
    assert store.get_dispatched(completion.job_hash)["audit_requested"] == 1
    assert store.get_dispatched(chat.job_hash)["audit_requested"] == 0


def test_plain_openai_sync_client_streams(threaded_node):
    client = openai.OpenAI(base_url=threaded_node.url + "/v1", api_key="unused", max_retries=0)
    stream = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0, stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason in ("stop", "length") and "verillm" in chunks[-1].model_extra


def test_complete_command(threaded_node, served_tiny):
    result = CliRunner().invoke(complete, ["--url", threaded_node.url, "--max-tokens", "4", "--json", "The river"])
    assert result.exit_code == 3, result.output  # shown, but a node without a chain ties its signer to no network
    body = json.loads(result.output)
    assert body["tied_to_network"] is False and body["network"].startswith("not tied to any network")
    assert len(body["tokens"]) == 4 and body["receipt"]["worker"] == threaded_node.app[APP_KEY].address_hex
    assert body["text"] == served_tiny.tokenizer.decode(body["tokens"], skip_special_tokens=True)  # decoded by the CLI (auto: tiny)
    assert any(n.startswith("model 0x") for n in body["not_checked"]) and any(n.startswith("deployment") for n in body["not_checked"])
    jobs = "0x" + threaded_node.app[APP_DOMAIN].verifying_contract.hex()
    result = CliRunner().invoke(complete, ["--url", threaded_node.url, "--max-tokens", "2", "--chain-id", "5", "--jobs-address", jobs, "Hi"])
    assert result.exit_code != 0 and isinstance(result.exception, InvalidSignature)
