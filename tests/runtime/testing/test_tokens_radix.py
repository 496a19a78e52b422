"""The fakes' tokenizer and the sim-server's radix prefix cache."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt.protocols import (
    AssistantMessage,
    ChatMessage,
    FunctionCall,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from agentrt.runtime.models.sglang._sglang_template import render_chat
from agentrt.runtime.testing._tokens import (
    decode_ids,
    encode,
    encode_prompt,
    encode_segmented,
    synthetic_logprob,
    synthetic_top,
    tokenize,
)
from agentrt.runtime.testing.sim._radix import RadixCache


def test_tokenize_rule_is_the_documented_one() -> None:
    assert tokenize("Hello, world!\n") == ["Hello", ",", " world", "!", "\n"]
    assert tokenize("  a  b") == ["  a", "  b"]


@given(st.text())
def test_tokens_join_back_to_the_text(text: str) -> None:
    assert "".join(tokenize(text)) == text


@given(st.lists(st.text(max_size=30), max_size=6))
def test_segmented_encoding_equals_plain_encoding(turns: list[str]) -> None:
    text = "\n".join(f"<|im_start|>user\n{t}<|im_end|>" for t in turns) + "\n<|im_start|>x\n"
    assert encode_segmented(text) == encode(text)
    prompt = encode_prompt(text)
    assert prompt.extend("reply <tool_call>") == encode(text + "reply <tool_call>")


_WORDS = st.sampled_from(["a", " b", "<", "|", "im_end", ".", " word", "\n", "  x", "\n<"])


@given(st.text(max_size=40), st.lists(_WORDS, max_size=8), st.sampled_from(["", "<|im_end|>"]))
def test_extending_with_tokens_equals_encoding_the_whole(
    prompt: str, words: list[str], end: str
) -> None:
    pieces = tokenize("".join(words))  # generated text is a token sequence
    encoded = encode_prompt(prompt + "\n<|im_start|>assistant\n")
    text = prompt + "\n<|im_start|>assistant\n" + "".join(pieces) + end
    assert encoded.extend_tokens(pieces, end) == encode(text)
    plain = encode_prompt(prompt)
    assert plain.extend_tokens(pieces, end) == encode(prompt + "".join(pieces) + end)


def test_a_growing_conversation_extends_its_token_sequence() -> None:
    tools = [ToolSpec(name="search")]
    call = ToolCall(id="c1", function=FunctionCall(name="search", arguments='{"q":"x"}'))
    first: list[ChatMessage] = [SystemMessage("be brief"), UserMessage("find x")]
    later = [*first, AssistantMessage(tool_calls=[call]), ToolMessage("found", "c1")]
    a = encode(render_chat(first, tools))
    b = encode(render_chat(later, tools))
    # All but the generation prompt's last token ("\n") is shared.
    assert b[: len(a) - 1] == a[:-1]


def test_ids_decode_through_the_tokens_seen() -> None:
    ids = encode("alpha beta")
    assert decode_ids(ids) == "alpha beta"
    assert decode_ids([7]) == "<id:7>"


def test_synthetic_logprobs_are_deterministic_and_ranked() -> None:
    assert synthetic_logprob("x", 3, 1) == synthetic_logprob("x", 3, 1)
    assert -2.0 <= synthetic_logprob("x", 3, 1) < 0
    top = synthetic_top("x", 3, 4, 1)
    assert top[0][0] == "x"
    assert [lp for _, lp in top] == sorted((lp for _, lp in top), reverse=True)
    assert synthetic_top("x", 3, 0) == []


def test_radix_cache_matches_prefixes_and_splits_edges() -> None:
    cache = RadixCache()
    assert cache.match([1, 2, 3]) == 0
    cache.insert([1, 2, 3, 4])
    assert cache.match([1, 2, 3, 4, 5]) == 4
    assert cache.match([1, 2, 9]) == 2
    cache.insert([1, 2, 9, 9])  # splits the edge after [1, 2]
    assert cache.match([1, 2, 9, 9]) == 4
    assert cache.match([1, 2, 3, 4]) == 4
    assert cache.size_tokens == 6
    assert cache.match_insert([1, 2, 3, 7]) == 3
    assert cache.match([1, 2, 3, 7]) == 4


def test_radix_cache_counts_queries_and_hits_in_tokens() -> None:
    cache = RadixCache()
    cache.insert([1, 2, 3])
    cache.match([1, 2, 3, 4])
    cache.match([5])
    assert (cache.query_tokens, cache.hit_tokens) == (5, 3)
    assert (cache.query_requests, cache.hit_requests) == (2, 1)
    assert cache.hit_rate == pytest.approx(3 / 5)


def test_radix_cache_evicts_least_recently_used_leaves() -> None:
    cache = RadixCache(capacity_tokens=12)
    cache.insert([1, 1, 1, 1, 1])
    cache.insert([2, 2, 2, 2, 2])
    cache.match([1, 1, 1, 1, 1])  # touch the first sequence
    cache.insert([3, 3, 3, 3, 3])  # over capacity: the LRU leaf goes
    assert cache.size_tokens <= 10
    assert cache.match([1, 1, 1, 1, 1]) == 5
    assert cache.match([2, 2, 2, 2, 2]) == 0
    assert cache.evicted_tokens == 5


def test_radix_cache_flush_empties_it() -> None:
    cache = RadixCache()
    cache.insert([1, 2])
    cache.flush()
    assert cache.size_tokens == 0
    assert cache.match([1, 2]) == 0
    with pytest.raises(ValueError, match="capacity_tokens"):
        RadixCache(0)
