"""Stop strings end to end: the node cuts its text before the first stop string, the signed tokens
stay whole, and the client applies the same cut to the text it decodes, so it can still check the
node's text (and refuses a node that cut elsewhere)."""

import pytest

from verillm.client import Client
from verillm.client.checks import Findings, verify_text
from verillm.errors import InvalidProof
from verillm.node.appkeys import APP_DOMAIN


def test_a_stop_string_cuts_the_text_the_client_verifies(threaded_node, served_tiny):
    client = Client(threaded_node.url, model_id=served_tiny.model_id, domain=threaded_node.app[APP_DOMAIN], tokenizer=served_tiny.tokenizer)
    whole = client.complete("The quick brown fox", max_tokens=8, temperature=0)
    stop = whole.text[3:6]
    assert stop and stop in whole.text
    cut = client.complete("The quick brown fox", max_tokens=8, temperature=0, stop=[stop])
    assert cut.tokens == whole.tokens  # generation and receipt unchanged: the cut is the edge's
    assert cut.text == whole.text[: whole.text.find(stop)] and cut.finish_reason == "stop"


def test_a_node_whose_text_is_cut_elsewhere_is_refused(served_tiny, tiny_prompts):
    tokens = tuple(tiny_prompts[0][:6])
    full = served_tiny.tokenizer.decode(list(tokens), skip_special_tokens=True)
    stop = full[2:4]
    honest = verify_text(served_tiny.tokenizer, served_tiny.manifest, tokens, full[: full.find(stop)], False, Findings(), (stop,))
    assert honest == full[: full.find(stop)]
    with pytest.raises(InvalidProof, match="not what the receipt's output tokens decode to"):
        verify_text(served_tiny.tokenizer, served_tiny.manifest, tokens, full[:1], False, Findings(), (stop,))
