"""SGLang backend pieces without a server: routing, the template, streams."""

from __future__ import annotations

import json

import msgspec
import pytest

from agentrt.protocols import (
    AssistantMessage,
    FunctionCall,
    ModelRequest,
    SamplingParams,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from agentrt.runtime.kernel._errors import BackendUnavailable
from agentrt.runtime.models._replicas import ReplicaSet
from agentrt.runtime.models._retry import BreakerConfig
from agentrt.runtime.models.sglang._sglang_template import held_back, parse_tool_calls, render_chat
from agentrt.runtime.models.sglang._sglang_wire import (
    GenerateOutput,
    MetaInfo,
    StreamAssembly,
    build_payload,
)


def test_affinity_holds_until_the_replica_is_overloaded() -> None:
    replicas = ReplicaSet(["http://a", "http://b"], balance_abs_threshold=2)
    home = replicas.pick("run")
    assert replicas.pick("run") is home
    home.outstanding = 3  # more than 2 above the other replica
    spilled = replicas.pick("run")
    assert spilled is not home
    assert replicas.mapped("run") == home.index  # the mapping stays


def test_new_keys_spread_and_old_keys_are_forgotten() -> None:
    replicas = ReplicaSet(["http://a", "http://b", "http://c"], capacity=2)
    picked = []
    for key in ("k1", "k2", "k3"):
        replica = replicas.pick(key)
        replica.served += 1
        picked.append(replica.index)
    assert sorted(picked) == [0, 1, 2]
    assert replicas.mapped("k1") is None  # evicted: capacity 2
    assert replicas.mapped("k3") == picked[2]


def test_down_and_open_replicas_are_avoided() -> None:
    replicas = ReplicaSet(["http://a", "http://b"], breaker=BreakerConfig(failure_threshold=1))
    replicas.replicas[0].healthy = False
    assert replicas.pick(None).index == 1
    replicas.replicas[1].breaker.record_failure()  # opens
    assert replicas.pick(None).index == 0  # unhealthy beats open: health is a hint
    with pytest.raises(BackendUnavailable, match="already tried"):
        replicas.pick(None, exclude={0})


def test_the_template_renders_tools_calls_and_results() -> None:
    call = ToolCall(id="1", function=FunctionCall(name="f", arguments='{"a": 1}'))
    text = render_chat(
        [UserMessage("hi"), AssistantMessage(tool_calls=[call]), ToolMessage("r", "1")],
        [ToolSpec(name="f")],
    )
    assert text.startswith("<|im_start|>system\n# Tools")
    assert '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\nr\n</tool_response><|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_tool_calls_parse_back_even_when_malformed() -> None:
    content, calls = parse_tool_calls(
        'thinking <tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "g", "arguments": {"b": "x"}\n</tool_call>'
    )
    assert content == "thinking"
    assert [c.function.name for c in calls] == ["f", "g"]
    assert json.loads(calls[0].function.arguments) == {"a": 1}
    with pytest.raises(json.JSONDecodeError):
        json.loads(calls[1].function.arguments)
    assert parse_tool_calls("just text") == ("just text", [])
    assert held_back("so <tool") == len("<tool")
    assert held_back("a < b") == 0


def test_payload_carries_sampling_rid_and_logprobs() -> None:
    request = ModelRequest(
        messages=[UserMessage("x")],
        sampling=SamplingParams(max_tokens=7, temperature=0.2, seed=4, stop=["END"]),
        n=2,
        logprobs=True,
        top_logprobs=3,
        request_id="rid-1",
    )
    body = build_payload(request, stream=True)
    # n > 1: a batch of n prompts, each sample with an id agentrt can abort.
    assert body["rid"] == ["rid-1_0", "rid-1_1"]
    assert len(body["text"]) == 2
    assert body["text"][0] == body["text"][1]
    assert body["stream"] is True
    assert body["sampling_params"] == {
        "max_new_tokens": 7,
        "temperature": 0.2,
        "top_p": 1.0,
        "stop": ["END", "<|im_end|>"],
        "sampling_seed": 4,
    }
    assert (body["return_logprob"], body["top_logprobs_num"]) == (True, 3)
    single = build_payload(msgspec.structs.replace(request, n=1))
    assert (single["rid"], single["text"]) == ("rid-1", body["text"][0])


def test_stream_assembly_holds_back_tool_call_text() -> None:
    assembly = StreamAssembly(1, logprobs=False)
    out = []
    for text in (
        "Sure",
        "Sure <tool",
        'Sure <tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>',
    ):
        out += assembly.add(GenerateOutput(text=text, meta_info=MetaInfo()))
    assert "".join(d.content for d in out) == "Sure "
    calls = assembly.finish("call_")
    assert [(d.tool_name, d.tool_arguments) for d in calls] == [("f", "{}")]
