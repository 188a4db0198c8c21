"""The OpenAI-compatible API, driven by the unmodified `openai` package against a real node."""

import pytest
from openai import AsyncOpenAI

from verillm.node.api.access import compute_read_token
from verillm.node.appkeys import APP_DOMAIN, APP_KEY, APP_MODEL, APP_STORE
from verillm.wire import receipt_from_json
from verillm.spec.encoding import decode
from verillm.spec.job import compute_job_hash, compute_tokens_hash, compute_transcript_hash
from verillm.spec.receipt import verify_receipt_signature
from verillm.spec.types import Job


@pytest.fixture
async def openai_client(node):
    client = AsyncOpenAI(base_url=f"{node.url}/v1", api_key="unused", max_retries=0)
    yield client
    await client.close()


def check_verillm_field(node, verillm: dict, output_tokens: list[int]):
    """The receipt is signed by the node, covers these tokens and is stored as done."""
    receipt = receipt_from_json(verillm["receipt"])
    verify_receipt_signature(receipt, node.app[APP_DOMAIN])
    assert receipt.worker == node.app[APP_KEY].address
    assert receipt.output_hash == compute_transcript_hash(verillm["input_tokens"], output_tokens)
    assert receipt.input_hash == compute_tokens_hash(verillm["input_tokens"])
    assert receipt.num_positions == len(verillm["input_tokens"]) + len(output_tokens) - 1
    assert verillm["job_hash"] == "0x" + receipt.job_hash.hex()
    token = compute_read_token(node.app[APP_KEY], bytes.fromhex(verillm["job_hash"][2:]))
    assert verillm["status_url"] == f"{node.url}/v1/verillm/jobs/{verillm['job_hash']}?token={token}"
    job = decode(Job, bytes.fromhex(verillm["job"]["encoded"][2:]))
    assert compute_job_hash(job) == receipt.job_hash
    store = node.app[APP_STORE]
    assert store.get_job(receipt.job_hash).status == "done"
    assert store.get_dispatched(receipt.job_hash)["audit_requested"] == 0
    return receipt


async def test_models_lists_the_served_model(openai_client, served_tiny):
    models = await openai_client.models.list()
    assert [m.id for m in models.data] == [served_tiny.name]
    assert models.data[0].model_extra["verillm"]["model_id"] == "0x" + served_tiny.model_id.hex()


async def test_completion_carries_a_signed_receipt(openai_client, node, served_tiny):
    completion = await openai_client.completions.create(model="tiny", prompt="The quick brown fox", max_tokens=6, temperature=0)
    verillm = completion.model_extra["verillm"]
    assert completion.usage.completion_tokens == len(verillm["output_tokens"]) == 6
    assert completion.choices[0].finish_reason == "length"
    assert completion.choices[0].text == served_tiny.tokenizer.decode(verillm["output_tokens"], skip_special_tokens=True)
    assert verillm["input_tokens"] == served_tiny.tokenizer.encode("The quick brown fox")
    receipt = check_verillm_field(node, verillm, verillm["output_tokens"])
    assert receipt.sampling.temperature_milli == 0


async def test_completion_from_token_ids_is_deterministic_under_a_seed(openai_client, node):
    kwargs = dict(model="tiny-llama-seed0", prompt=[5, 17, 300, 42], max_tokens=5, temperature=0.8, top_p=0.9, seed=7)
    first = await openai_client.completions.create(**kwargs, extra_body={"top_k": 50})
    second = await openai_client.completions.create(**kwargs, extra_body={"top_k": 50})
    a, b = first.model_extra["verillm"], second.model_extra["verillm"]
    assert a["input_tokens"] == [5, 17, 300, 42]
    assert a["output_tokens"] == b["output_tokens"]
    assert a["job_hash"] != b["job_hash"]  # each request is its own job (fresh nonce)
    receipt = check_verillm_field(node, a, a["output_tokens"])
    assert (receipt.sampling.temperature_milli, receipt.sampling.top_p_ppm, receipt.sampling.top_k, receipt.sampling.seed) == (800, 900_000, 50, 7)


async def test_chat_uses_the_model_chat_template(openai_client, node, served_tiny):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    chat = await openai_client.chat.completions.create(model="tiny", messages=messages, max_tokens=4, temperature=0)
    verillm = chat.model_extra["verillm"]
    expected = served_tiny.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]
    assert verillm["input_tokens"] == list(expected)
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content == served_tiny.tokenizer.decode(verillm["output_tokens"], skip_special_tokens=True)
    check_verillm_field(node, verillm, verillm["output_tokens"])


async def test_streamed_completion_equals_the_plain_one(openai_client, node):
    kwargs = dict(model="tiny", prompt="Children learn to count", max_tokens=8, temperature=0)
    plain = await openai_client.completions.create(**kwargs)
    stream = await openai_client.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == plain.choices[0].text
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    verillm = finals[0].model_extra["verillm"]
    assert verillm["output_tokens"] == plain.model_extra["verillm"]["output_tokens"]
    assert chunks[-1].usage.completion_tokens == 8
    check_verillm_field(node, verillm, verillm["output_tokens"])


async def test_streamed_chat_sends_role_then_content_then_receipt(openai_client, node):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    stream = await openai_client.chat.completions.create(model="tiny", messages=messages, max_tokens=5, temperature=0, stream=True)
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    verillm = chunks[-1].model_extra["verillm"]
    check_verillm_field(node, verillm, verillm["output_tokens"])
    assert content == node.app[APP_MODEL].tokenizer.decode(verillm["output_tokens"], skip_special_tokens=True)


async def test_a_client_nonce_is_the_jobs_nonce_and_the_same_request_again_is_the_same_receipt(openai_client, node):
    """`verillm.nonce`: the receipt signs the client's nonce; sending the same request and nonce again
    (a retry, with its seed: a node-chosen seed makes another job) returns the same job and receipt."""
    nonce = "0x" + "ab" * 32
    kwargs = dict(model="tiny", prompt=[5, 17, 300], max_tokens=4, temperature=0, seed=3, extra_body={"verillm": {"nonce": nonce}})
    first = (await openai_client.completions.create(**kwargs)).model_extra["verillm"]
    job = decode(Job, bytes.fromhex(first["job"]["encoded"][2:]))
    assert "0x" + job.nonce.hex() == nonce
    check_verillm_field(node, first, first["output_tokens"])
    again = (await openai_client.completions.create(**kwargs)).model_extra["verillm"]
    assert again["job_hash"] == first["job_hash"] and again["receipt"] == first["receipt"]


@pytest.mark.parametrize(("nonce", "says"), [("ab" * 32, "0x-prefixed"), ("0x" + "ab" * 31, "expected 32 bytes"), ("0xzz" + "ab" * 31, "not valid hex"), (7, "0x-prefixed")])
async def test_a_malformed_client_nonce_is_refused_naming_the_field(openai_client, nonce, says):
    import openai

    with pytest.raises(openai.BadRequestError) as refused:
        await openai_client.completions.create(model="tiny", prompt="x", max_tokens=2, extra_body={"verillm": {"nonce": nonce}})
    assert "verillm.nonce" in str(refused.value) and says in str(refused.value)
