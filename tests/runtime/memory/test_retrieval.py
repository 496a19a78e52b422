"""Per-step retrieval: queries from observations, ranking, the embedder hook."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentrt.runtime.memory._bank import MemoryBank, NewItem, Owners
from agentrt.runtime.memory._retrieval import Retriever, build_query
from agentrt.runtime.memory._view import MemoryView

pytestmark = pytest.mark.anyio


def test_the_query_puts_observation_terms_first_and_drops_stopwords() -> None:
    query = build_query("The zinc sample melted at 420", "What is the density of zinc?")
    assert query == '"zinc" OR "sample" OR "melted" OR "420" OR "density"'
    assert build_query("the of and", "") == ""
    assert build_query("a b c d e f", "alpha beta gamma", max_terms=2) == '"alpha" OR "beta"'


async def test_retrieval_follows_the_latest_observation() -> None:
    async with MemoryBank() as bank:
        view = MemoryView(bank, run_id="run-1", k=2)
        for key in (
            "zinc melting point 420 C",
            "gold density 19.3 g/cm3",
            "zinc density 7.14 g/cm3",
            "train timetable Paris Lyon",
        ):
            await bank.put(NewItem(scope="run", owner="run-1", key=key, value=key))
        task = "Compare metals"
        about_zinc = await view.keys_for("search result: zinc density table", task)
        assert next(h.key for h in about_zinc) == "zinc density 7.14 g/cm3"
        about_trains = await view.keys_for("next train from Paris", task)
        assert [h.key for h in about_trains] == ["train timetable Paris Lyon"]
        note = view.note(about_trains)
        assert note.splitlines()[1].endswith("train timetable Paris Lyon (unverified)")


class LetterEmbedder:
    """Embeds texts as counts of the letters 'x', 'y', 'z' (a toy)."""

    def __init__(self) -> None:
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return [[float(t.count(c)) for c in "xyz"] for t in texts]


async def test_an_embedder_reranks_the_bm25_candidates() -> None:
    async with MemoryBank() as bank:
        for key in ("report x x x", "report y y y", "report z z z"):
            await bank.put(NewItem(scope="run", owner="run-1", key=key, value=key))
        owners: Owners = [("run", "run-1")]
        embedder = LetterEmbedder()
        retriever = Retriever(bank, k=1, embedder=embedder)
        best = await retriever.retrieve("report zzz z", owners)
        assert [h.key for h in best] == ["report z z z"]
        assert embedder.calls == 1
        plain = await Retriever(bank, k=3).retrieve("report", owners)
        assert len(plain) == 3
