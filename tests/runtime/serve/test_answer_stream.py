"""``AnswerStream``: what an OpenAI-style stream says as a run goes."""

from __future__ import annotations

from agentrt.protocols import RolloutFinished, TokenDelta, VoteCast
from agentrt.runtime.serve.openai._answer_stream import AnswerStream, StreamText

RUN = "run-1"


def token(step: int, text: str, rollout: str = "r0", reasoning: str = "") -> TokenDelta:
    return TokenDelta(
        run_id=RUN, rollout_id=f"{RUN}-{rollout}", step=step, text=text, reasoning=reasoning
    )


def test_one_rollout_streams_its_text_as_the_answer() -> None:
    stream = AnswerStream(RUN, 1)
    assert stream.feed(token(0, "The ans", reasoning="hm")) == StreamText(
        content="The ans", reasoning="hm"
    )
    assert stream.feed(token(0, "wer is 4")) == StreamText(content="wer is 4")
    assert stream.rest("The answer is 4") == ""  # all of it was streamed
    assert stream.rest("The answer is 42") == "2"
    # An answer the last step did not stream (a finish tool): sent whole.
    assert stream.rest("4") == "\n\n4"
    # A sub-agent's text is not the answer.
    assert stream.feed(token(0, "x", rollout="r0.helper-1")) is None


def test_a_new_step_starts_the_answer_over() -> None:
    stream = AnswerStream(RUN, 1)
    stream.feed(token(0, "Let me look. "))
    stream.feed(token(1, "42"))
    assert stream.rest("42") == ""


def test_several_rollouts_give_progress_as_reasoning() -> None:
    stream = AnswerStream(RUN, 3)
    assert stream.feed(token(0, "text")) is None
    done = RolloutFinished(run_id=RUN, rollout_id=f"{RUN}-r1", status="finished", answer="7")
    failed = RolloutFinished(
        run_id=RUN, rollout_id=f"{RUN}-r2", status="failed", stop_reason="model call failed: x"
    )
    vote = VoteCast(run_id=RUN, aggregator="rtv", round=1, candidates=[], winner=f"{RUN}-r1")
    assert stream.feed(done) == StreamText(reasoning="rollout r1 finished: answer: 7\n")
    assert stream.feed(failed) == StreamText(reasoning="rollout r2 failed: model call failed: x\n")
    assert stream.feed(vote) == StreamText(reasoning="rtv round 1: winner r1\n")
    assert stream.rest("7") == "7"
